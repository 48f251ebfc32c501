package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newTracerProvider returns the tracer provider that OTEL_TRACES_EXPORTER (read with
// getenv) names: nil for "none" or unset; for "console", spans written to out as JSON;
// for "otlp", spans sent over OTLP, grpc or http/protobuf (the default) as
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL say. The exporters
// and the SDK read every other OTEL_* variable themselves; the service name is "sluice"
// unless OTEL_SERVICE_NAME says otherwise.
func newTracerProvider(ctx context.Context, getenv func(string) string, out io.Writer) (*sdktrace.TracerProvider, error) {
	var exp sdktrace.SpanExporter
	var err error
	switch name := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); name {
	case "", "none":
		return nil, nil
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(out))
	case "otlp":
		switch proto := cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL")); proto {
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		case "", "http/protobuf":
			exp, err = otlptracehttp.New(ctx)
		default:
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: want grpc or http/protobuf", proto)
		}
	default:
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: want otlp, console or none", name)
	}
	if err != nil {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", "sluice")),
		resource.Environment(),
	)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
