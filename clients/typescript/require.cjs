// What require("@reinhq/rein-client") finds: the package is ESM-only (its
// dependencies, protobuf-es and Connect, are ESM), so a CommonJS caller is
// told how to load it instead of Node's "No exports main defined".
throw new Error('@reinhq/rein-client is ESM-only: use import, or await import("@reinhq/rein-client") from CommonJS');
