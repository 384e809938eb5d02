// Package telemetry is rein's OpenTelemetry traces: the SDK set up from the
// standard OTEL_* environment (Setup), and the spans of each run, built
// from its events as they are published (Tracer), following the
// OpenTelemetry GenAI semantic conventions (SemconvVersion).
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/reinhq/rein/internal/version"
)

// SemconvVersion is the version of the OpenTelemetry semantic conventions
// whose GenAI spans and attributes rein follows (they are at Development
// status, so the version is pinned).
const SemconvVersion = "1.38.0"

// Setup builds a TracerProvider that exports over OTLP as the standard
// environment says: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL picks grpc or
// http/protobuf (the default), OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT,
// _HEADERS, _INSECURE and the rest are read by the exporters,
// OTEL_TRACES_SAMPLER(_ARG) by the SDK, OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES name the service ("rein" unless they say
// otherwise). It also installs the W3C trace-context and baggage
// propagators, so a caller's trace continues into rein. Shut the provider
// down to flush what is left.
func Setup(ctx context.Context) (*sdktrace.TracerProvider, error) {
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	var err error
	switch strings.TrimSpace(protocol) {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: rein exports traces over grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	res, err := Resource(ctx)
	if err != nil {
		return nil, err
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// Resource is what rein's spans say of the process: service.name "rein"
// (or OTEL_SERVICE_NAME), service.version, and OTEL_RESOURCE_ATTRIBUTES.
func Resource(ctx context.Context) (*resource.Resource, error) {
	own := resource.NewSchemaless(attribute.String("service.name", "rein"), attribute.String("service.version", version.Get().GetVersion()))
	env, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return resource.Merge(own, env)
}
