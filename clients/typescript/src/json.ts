// Plain JSON in and out, so that a caller needs no @bufbuild/protobuf
// import of its own: a contract from its JSON (task.json, as the CLI and
// grpcurl take it), and a proposal, its arguments and its preview as plain
// JS objects, which print as JSON (a preview is a google.protobuf.Value:
// JSON.stringify of the message prints its kind/case structure, not the
// value).
import { fromJson, fromJsonString, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";

import { TaskContractSchema, type TaskContract } from "./gen/rein/v1/contract_pb.js";
import { ProposalSchema, type Proposal } from "./gen/rein/v1/run_pb.js";

export type { JsonObject, JsonValue };

// contractFromJson is a TaskContract from its JSON: a parsed object, or
// the text of one. An unknown field or a wrong type throws, naming it.
export function contractFromJson(json: JsonValue | string): TaskContract {
  return typeof json === "string" ? fromJsonString(TaskContractSchema, json) : fromJson(TaskContractSchema, json);
}

// proposalJson is a proposal as plain JSON (the API's JSON names:
// proposalId, tool, arguments, preview, hash, expiresAt, …), for printing.
export function proposalJson(p: Proposal): JsonObject {
  return toJson(ProposalSchema, p) as JsonObject;
}

// previewJson is what the tool previews of a proposal's write, as plain
// JSON; undefined when it has none.
export function previewJson(p: Proposal): JsonValue | undefined {
  return p.preview ? toJson(ValueSchema, p.preview) : undefined;
}

// argumentsJson is a proposal's arguments as plain JSON ({} when none).
export function argumentsJson(p: Proposal): JsonObject {
  return p.arguments ?? {};
}
