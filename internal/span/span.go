// Package span traces decision requests with OpenTelemetry: one span per request that
// the evaluator decides, started by a front end (package server's JSON API and Envoy RLS,
// package httplimit and so the proxy) and ended with what the decision was.
//
// A span carries the attributes docs/service.md lists ("Traces"); sluice.error_kind is
// the sluice.ErrorKind of a store failure a failure mode absorbed, or of the error
// returned, which also sets the span's status to Error.
//
// The zero Tracer is off: Start returns its context unchanged and End does nothing, so
// tracing off costs no allocation. Trace context crosses processes as W3C traceparent
// (propagation.TraceContext).
package span

import (
	"context"
	"maps"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/evaluator"
)

// Instrumentation is the instrumentation scope of sluice's spans.
const Instrumentation = "github.com/sluicehq/sluice"

// Attribute keys of a decision span.
const (
	KeyPolicy       = attribute.Key("sluice.policy")
	KeyDomain       = attribute.Key("sluice.domain")
	KeyResult       = attribute.Key("sluice.result")
	KeyPath         = attribute.Key("sluice.path")
	KeyStoreLatency = attribute.Key("sluice.store_latency_ms")
	KeyErrorKind    = attribute.Key("sluice.error_kind")
)

var traceContext propagation.TraceContext

// Tracer starts decision spans. The zero Tracer is off.
type Tracer struct{ t trace.Tracer }

// NewTracer returns a Tracer of tp's; a nil tp is off.
func NewTracer(tp trace.TracerProvider) Tracer {
	if tp == nil {
		return Tracer{}
	}
	return Tracer{tp.Tracer(Instrumentation)}
}

// Extract returns ctx with the remote span context of carrier's traceparent, when ctx
// holds no span and t is on; ctx otherwise.
func (t Tracer) Extract(ctx context.Context, carrier propagation.TextMapCarrier) context.Context {
	if t.t == nil || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return traceContext.Extract(ctx, carrier)
}

// Inject writes the traceparent (and tracestate) of ctx's span to carrier, when t is on
// and ctx holds a span.
func (t Tracer) Inject(ctx context.Context, carrier propagation.TextMapCarrier) {
	if t.t == nil {
		return
	}
	traceContext.Inject(ctx, carrier)
}

// Start starts the span named name of one decision request, a child of ctx's span. It
// is a server span when that parent is remote or absent (sluice is the first to see the
// request), internal otherwise.
func (t Tracer) Start(ctx context.Context, name string) (context.Context, Span) {
	if t.t == nil {
		return ctx, Span{}
	}
	kind := trace.SpanKindInternal
	if sc := trace.SpanContextFromContext(ctx); !sc.IsValid() || sc.IsRemote() {
		kind = trace.SpanKindServer
	}
	ctx, s := t.t.Start(ctx, name, trace.WithSpanKind(kind))
	return ctx, Span{s}
}

// Span is the span of one decision request; the zero Span (tracing off) does nothing.
type Span struct{ s trace.Span }

// On reports whether s records (so that attributes worth computing can be).
func (s Span) On() bool { return s.s != nil }

// End records the scope attribute (ignored when its key is ""), and the outcome of the
// request, and ends the span. err is the error the request was answered with, if any.
func (s Span) End(scope attribute.KeyValue, out evaluator.Outcome, err error) {
	if s.s == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	if scope.Key != "" {
		attrs = append(attrs, scope)
	}
	result := "allowed"
	switch {
	case err != nil:
		result = "error"
	case !out.Allowed:
		result = "denied"
	}
	attrs = append(attrs, KeyResult.String(result))
	rep := out.Report
	if rep.StoreCalled || out.Path != sluice.PathStore {
		attrs = append(attrs, KeyPath.String(out.Path.String()))
	}
	if rep.StoreCalled {
		attrs = append(attrs, KeyStoreLatency.Float64(float64(rep.StoreLatency.Microseconds())/1000))
	}
	kind := rep.Kind
	if kind == "" && err != nil {
		kind = sluice.KindOf(err)
	}
	if kind != "" {
		attrs = append(attrs, KeyErrorKind.String(string(kind)))
	}
	s.s.SetAttributes(attrs...)
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, string(kind))
	}
	s.s.End()
}

// ExtractGRPC is Extract with the incoming gRPC metadata of ctx as the carrier.
func (t Tracer) ExtractGRPC(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	return t.Extract(ctx, mdCarrier(md))
}

// mdCarrier is gRPC metadata as a propagation.TextMapCarrier (keys are lower case).
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string { return slices.Collect(maps.Keys(c)) }
