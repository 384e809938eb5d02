package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"go.opentelemetry.io/otel/trace"
)

// runTrace is the trace a new run is in, and the span it hangs from: the
// call's own (the caller's trace, carried in its gRPC metadata, continued
// by the server's span for this call) when it has one, else a new trace
// with no parent. A run gets a trace ID whether tracing is on or not, so a
// run started with tracing off is traced in its own trace once it is on.
func runTrace(ctx context.Context) (traceID, parentSpanID string) {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		if sc.HasSpanID() {
			parentSpanID = sc.SpanID().String()
		}
		return sc.TraceID().String(), parentSpanID
	}
	var id trace.TraceID
	_, _ = rand.Read(id[:])
	return hex.EncodeToString(id[:]), ""
}
