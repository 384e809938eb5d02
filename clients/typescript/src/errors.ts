// Typed errors: every failed call throws a ReinError, or one of its
// subclasses for the codes a caller acts on (docs/api.md "Errors", the
// mapping of docs/design.md §10 "Errors on the wire"). Each carries the
// server's message and code.
import { Code, ConnectError } from "@connectrpc/connect";
import { fromBinary } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { DurationSchema } from "@bufbuild/protobuf/wkt";

export { Code };

// One field of a google.rpc.BadRequest detail.
export interface FieldViolation {
  field: string;
  description: string;
}

// ReinError is a call's failure: the gRPC code and the server's message.
export class ReinError extends Error {
  override name = "ReinError";
  // The gRPC code (Connect's Code enum, numbered as gRPC numbers them).
  readonly code: Code;
  // The code's gRPC name: "NOT_FOUND", "FAILED_PRECONDITION", ….
  readonly codeName: string;
  // The server's message as it sent it, without the code in front.
  readonly rawMessage: string;
  // The response's headers and trailers.
  readonly metadata: Headers;
  // The delay of the error's google.rpc.RetryInfo detail, in
  // milliseconds; undefined when it carries none.
  readonly retryDelayMs: number | undefined;
  // The error as Connect raised it.
  override readonly cause: ConnectError;
  // The server that answered so, or could not be reached (as given to
  // connect), when the client knows it.
  server: string | undefined;

  constructor(err: ConnectError, code: Code = err.code) {
    super(`${codeNames[code] ?? `CODE_${code}`}: ${err.rawMessage}`);
    this.code = code;
    this.codeName = codeNames[code] ?? `CODE_${code}`;
    this.rawMessage = err.rawMessage;
    this.metadata = err.metadata;
    this.retryDelayMs = retryDelayMs(err);
    this.cause = err;
  }
}

// NotFound: an unknown run, or another tenant's (the same answer).
export class NotFoundError extends ReinError {
  override name = "NotFoundError";
}

// Aborted (a stale version, or the run's lease taken by another server:
// reload and retry) or AlreadyExists (an import of a run or request ID
// already stored).
export class ConflictError extends ReinError {
  override name = "ConflictError";
}

// FailedPrecondition: the run's state does not allow the call (a terminal
// run, a proposal no longer pending, a paused run steered, …).
export class FailedPreconditionError extends ReinError {
  override name = "FailedPreconditionError";
}

// Unavailable: no server of the list could be reached, or it is shutting
// down. The call may or may not have been applied when the connection
// ended after it was sent.
export class UnavailableError extends ReinError {
  override name = "UnavailableError";
}

// ResourceExhausted: over the principal's rate or a full disk (with a
// retryDelayMs, from the server's RetryInfo), or an oversize request
// (without: waiting does not fix it).
export class ResourceExhaustedError extends ReinError {
  override name = "ResourceExhaustedError";
  // The server's RetryInfo delay, in milliseconds, or undefined.
  get retryDelay(): number | undefined {
    return this.retryDelayMs;
  }
}

// InvalidArgument: a bad request; fieldViolations holds the
// google.rpc.BadRequest detail naming the field.
export class InvalidArgumentError extends ReinError {
  override name = "InvalidArgumentError";
  readonly fieldViolations: FieldViolation[];
  constructor(err: ConnectError, code: Code = err.code) {
    super(err, code);
    this.fieldViolations = badRequest(err);
  }
}

// Unauthenticated: no token, or one the server does not know.
export class UnauthenticatedError extends ReinError {
  override name = "UnauthenticatedError";
}

// PermissionDenied: a role that may not, or a policy that forbids.
export class PermissionDeniedError extends ReinError {
  override name = "PermissionDeniedError";
}

// OutOfRange: a watch from beyond the run's head.
export class OutOfRangeError extends ReinError {
  override name = "OutOfRangeError";
}

// The names gRPC gives its codes, by number.
const codeNames: Record<number, string> = {
  [Code.Canceled]: "CANCELLED",
  [Code.Unknown]: "UNKNOWN",
  [Code.InvalidArgument]: "INVALID_ARGUMENT",
  [Code.DeadlineExceeded]: "DEADLINE_EXCEEDED",
  [Code.NotFound]: "NOT_FOUND",
  [Code.AlreadyExists]: "ALREADY_EXISTS",
  [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.ResourceExhausted]: "RESOURCE_EXHAUSTED",
  [Code.FailedPrecondition]: "FAILED_PRECONDITION",
  [Code.Aborted]: "ABORTED",
  [Code.OutOfRange]: "OUT_OF_RANGE",
  [Code.Unimplemented]: "UNIMPLEMENTED",
  [Code.Internal]: "INTERNAL",
  [Code.Unavailable]: "UNAVAILABLE",
  [Code.DataLoss]: "DATA_LOSS",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
};

// The Node.js error codes of a connection that failed or ended under a
// call: the server was not there, or went away. Connect reports some as
// Aborted or Internal, which on the wire mean something else (a stale
// version, a server bug); the client reports them as Unavailable, as the Go
// client reports grpc-go's bare io.EOF (client/retry.go, lostAnswer).
const lostConnection = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENETDOWN",
  "EHOSTDOWN",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ERR_STREAM_DESTROYED",
  "ERR_STREAM_PREMATURE_CLOSE",
  "ERR_HTTP2_INVALID_STREAM",
  "ERR_HTTP2_GOAWAY_SESSION",
  "ERR_HTTP2_SESSION_ERROR",
  "ERR_HTTP2_STREAM_CANCEL",
  "ERR_HTTP2_STREAM_ERROR",
  "ERR_HTTP2_ERROR",
  "ERR_HTTP2_PING_CANCEL",
]);

// lost reports whether err is the client's own report of a connection
// that failed or ended, rather than an answer of the server or the end the
// caller asked for (callerEnded: its signal aborted, its timeout passed).
function lost(err: ConnectError, callerEnded: boolean): boolean {
  if (err.isWireError || callerEnded) return false;
  if (err.code === Code.Unavailable) return true;
  // Node resets the streams of a connection that closed under them with
  // CANCEL, which Connect reports as Canceled: the server went away (a
  // SIGKILL), not the caller.
  if (err.code === Code.Canceled) return /stream closed with error code CANCEL/.test(err.rawMessage);
  if (err.code === Code.DeadlineExceeded) return false;
  const seen = new Set<unknown>();
  for (let e: unknown = err; e instanceof Error && !seen.has(e); e = (e as { cause?: unknown }).cause) {
    seen.add(e);
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && lostConnection.has(code)) return true;
  }
  // A stream the server's end closed with no gRPC status: the server
  // stopped mid-response.
  return /missing trailer|premature close|stream closed|session closed|socket hang up/i.test(err.rawMessage);
}

// toReinError turns anything a call threw into a ReinError of the class its
// code calls for. A connection that failed or ended under the call is
// Unavailable, whatever Connect called it, unless callerEnded says the
// caller ended the call (its signal aborted): that stays Canceled.
export function toReinError(reason: unknown, callerEnded = false): ReinError {
  if (reason instanceof ReinError) return reason;
  const err = ConnectError.from(reason);
  const code = lost(err, callerEnded) ? Code.Unavailable : err.code;
  switch (code) {
    case Code.NotFound:
      return new NotFoundError(err, code);
    case Code.Aborted:
    case Code.AlreadyExists:
      return new ConflictError(err, code);
    case Code.FailedPrecondition:
      return new FailedPreconditionError(err, code);
    case Code.Unavailable:
      return new UnavailableError(err, code);
    case Code.ResourceExhausted:
      return new ResourceExhaustedError(err, code);
    case Code.InvalidArgument:
      return new InvalidArgumentError(err, code);
    case Code.Unauthenticated:
      return new UnauthenticatedError(err, code);
    case Code.PermissionDenied:
      return new PermissionDeniedError(err, code);
    case Code.OutOfRange:
      return new OutOfRangeError(err, code);
  }
  return new ReinError(err, code);
}

const retryInfoType = "google.rpc.RetryInfo";
const badRequestType = "google.rpc.BadRequest";

// The raw details of err (type URL's last part and bytes): the details the
// client has no generated schema for, google.rpc's, are read by hand, as
// they are two small messages.
function rawDetails(err: ConnectError, type: string): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const d of err.details) {
    if ("type" in d && d.type === type) out.push(d.value);
  }
  return out;
}

// retryDelayMs is the delay of err's google.rpc.RetryInfo (message
// RetryInfo { google.protobuf.Duration retry_delay = 1; }), in
// milliseconds, at least 0; undefined without one (client/retry.go,
// RetryDelay).
export function retryDelayMs(err: unknown): number | undefined {
  if (err instanceof ReinError) return err.retryDelayMs;
  if (!(err instanceof ConnectError)) return undefined;
  for (const value of rawDetails(err, retryInfoType)) {
    try {
      const r = new BinaryReader(value);
      let ms = 0;
      while (r.pos < r.len) {
        const [field, wire] = r.tag();
        if (field === 1 && wire === WireType.LengthDelimited) {
          const d = fromBinary(DurationSchema, r.bytes());
          ms = Number(d.seconds) * 1000 + Math.floor(d.nanos / 1e6);
        } else {
          r.skip(wire, field);
        }
      }
      return Math.max(ms, 0);
    } catch {
      // A detail that does not decode names no delay.
    }
  }
  return undefined;
}

// badRequest reads err's google.rpc.BadRequest details
// (message BadRequest { repeated FieldViolation field_violations = 1; }
// message FieldViolation { string field = 1; string description = 2; }).
function badRequest(err: ConnectError): FieldViolation[] {
  const out: FieldViolation[] = [];
  for (const value of rawDetails(err, badRequestType)) {
    try {
      const r = new BinaryReader(value);
      while (r.pos < r.len) {
        const [field, wire] = r.tag();
        if (field !== 1 || wire !== WireType.LengthDelimited) {
          r.skip(wire, field);
          continue;
        }
        const v = new BinaryReader(r.bytes());
        const fv: FieldViolation = { field: "", description: "" };
        while (v.pos < v.len) {
          const [f, w] = v.tag();
          if (f === 1 && w === WireType.LengthDelimited) fv.field = v.string();
          else if (f === 2 && w === WireType.LengthDelimited) fv.description = v.string();
          else v.skip(w, f);
        }
        out.push(fv);
      }
    } catch {
      // A detail that does not decode is left out.
    }
  }
  return out;
}
