#!/usr/bin/env bash
# Builds the pinned code-generation tools (buf, protoc-gen-go,
# protoc-gen-go-grpc) from tools/go.mod into .bin/. Go's build cache makes a
# second run take a second.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .bin
(cd tools && go build -o ../.bin/ tool)
