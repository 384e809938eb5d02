// @reinhq/rein-client: the TypeScript client of rein's RunService.
export {
  approvalsWanted,
  connect,
  pauseEnds,
  pendingProposal,
  type PauseEnd,
  ReinClient,
  MAX_RETRY_INFO_ATTEMPTS,
  type CallOptions,
  type ConnectOptions,
  type ProposalRef,
  type RaiseBudgetInit,
  type StartRunInit,
  type StartRunResult,
  waitsForPerson,
} from "./client.js";
export { argumentsJson, contractFromJson, previewJson, proposalJson, type JsonObject, type JsonValue } from "./json.js";
export { DEFAULT_BACKOFF_MAX_MS, DEFAULT_BACKOFF_MIN_MS, type BackoffOptions } from "./backoff.js";
export { type TlsOptions } from "./transport.js";
export { MAX_STUCK_RETRIES, RECONNECT_TELL_EVERY_MS, Reconnect, ReconnectCause, type WatchRunItem, type WatchRunOptions, type WatchRunsOptions } from "./watch.js";
export {
  Code,
  ConflictError,
  FailedPreconditionError,
  InvalidArgumentError,
  NotFoundError,
  OutOfRangeError,
  PermissionDeniedError,
  ReinError,
  ResourceExhaustedError,
  UnauthenticatedError,
  UnavailableError,
  retryDelayMs,
  toReinError,
  type FieldViolation,
} from "./errors.js";
// The generated messages and the service, as protoc-gen-es makes them.
export * from "./gen/rein/v1/contract_pb.js";
export * from "./gen/rein/v1/decision_pb.js";
export * from "./gen/rein/v1/event_pb.js";
export * from "./gen/rein/v1/export_pb.js";
export * from "./gen/rein/v1/run_pb.js";
export * from "./gen/rein/v1/run_service_pb.js";
