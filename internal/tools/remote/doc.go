// Package remote runs tools that live in another process: a tool service
// that implements rein.v1.ToolService (proto/rein/v1/tool_service.proto).
//
// Client is the rein side: a tools.Executor and tools.Looker over the
// generated ToolService client, registered under a name (`rein serve
// --tool-server NAME=ADDR`). Server is the other side: it serves any
// tools.Executor as a ToolService, so a tool written against rein's own
// interface can run in its own process.
//
// The invariants the two sides keep:
//
//   - The ctx of a call is the RPC's: its deadline travels to the service,
//     and cancelling it cancels the service's handler. The client adds no
//     deadline and no retry of its own; the harness owns both.
//   - Nothing is cached: List asks the service each time, on the one
//     connection the Client keeps, so a service that changed its tools is
//     seen at the next call.
//   - A service that goes away is re-dialed by gRPC in the background, with
//     the backoff Dial sets (100ms doubling to 5s): no call is needed to
//     reconnect, no state of the outage is kept, and the first call after
//     the service is back works. A call made while it is down fails
//     Unavailable (a read's observation; a commit's unknown outcome).
//   - Errors say what went wrong and what to do, and keep their causes:
//     errors.Is(err, context.DeadlineExceeded) holds for a call that ran out
//     of time, errors.Is(err, tools.ErrNoTool) for an unknown tool, and
//     status.Code(err) still reads the service's gRPC code.
//   - On the wire, NotFound means "no such tool" and nothing else (a service
//     that cannot find an invoice says so with InvalidArgument), and
//     InvalidArgument's message is written for the model, which reads it.
//   - Call.Index does not cross the wire: a service sees 0. Call.Preview
//     does for CommitWrite, the only request that carries it.
package remote
