package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/evaluator"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/span"
	"github.com/sluicehq/sluice/stack"
)

// recorder returns a tracer provider whose spans are exported, as each ends, to the
// returned in-memory exporter.
func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, exp
}

// attrs returns the span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// checkSpan asserts that s is a decision span named name with scope and result, decided
// by the store.
func checkSpan(t *testing.T, s tracetest.SpanStub, name string, scope attribute.KeyValue, result string) {
	t.Helper()
	a := attrs(s)
	if s.Name != name || a[scope.Key] != scope.Value || a[span.KeyResult].AsString() != result || a[span.KeyPath].AsString() != "store" {
		t.Fatalf("span %q %v, want %q with %s=%s, result %s, path store", s.Name, s.Attributes, name, scope.Key, scope.Value.Emit(), result)
	}
	if _, ok := a[span.KeyStoreLatency]; !ok {
		t.Fatalf("span %q has no %s: %v", s.Name, span.KeyStoreLatency, s.Attributes)
	}
	if _, ok := a[span.KeyErrorKind]; ok {
		t.Fatalf("span %q has an error kind without an error: %v", s.Name, s.Attributes)
	}
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestTraceServe: on the production stack (memory and Redis), one span per decision
// request of the gRPC and JSON APIs.
func TestTraceServe(t *testing.T) {
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) { testTraceServe(t, k) })
	}
}

func testTraceServe(t *testing.T, k storeKind) {
	cfg := loadConfig(t, "policies.yaml", "edge.yaml")
	st := k.open(t, cfg, nil, stack.Options{})
	tp, exp := recorder(t)
	s, err := New(Options{Limiter: st.Limiter(), Ready: st.Ready, Config: cfg, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, s)

	// gRPC: 3 per minute per address, then denied; the caller's traceparent is the parent.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", traceparent)
	for range 4 {
		if _, err := r.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitDescriptor{desc("remote_address", "192.0.2.1")}}); err != nil {
			t.Fatal(err)
		}
	}
	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans for 4 calls: %v", len(spans), spans)
	}
	for i, sp := range spans {
		want := "allowed"
		if i == 3 {
			want = "denied"
		}
		checkSpan(t, sp, "sluice.ShouldRateLimit", span.KeyDomain.String("edge"), want)
		if sp.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sp.Parent.SpanID().String() != "00f067aa0ba902b7" || sp.SpanKind != trace.SpanKindServer {
			t.Fatalf("span %d: trace %s parent %s kind %v, want the caller's trace and span as parent, a server span", i, sp.SpanContext.TraceID(), sp.Parent.SpanID(), sp.SpanKind)
		}
	}

	// JSON: check (3 allowed, then denied), peek and usage, one span each.
	exp.Reset()
	for range 4 {
		do(t, "POST", r.base+"/v1/check", `{"policy":"per-ip","key":"203.0.113.7"}`, "traceparent", traceparent)
	}
	do(t, "POST", r.base+"/v1/peek", `{"policy":"per-ip","key":"203.0.113.7"}`)
	do(t, "GET", r.base+"/v1/usage?policy=per-ip&key=203.0.113.7", "")
	spans = exp.GetSpans()
	if len(spans) != 6 {
		t.Fatalf("%d spans for 6 requests: %v", len(spans), spans)
	}
	for i, want := range []string{"allowed", "allowed", "allowed", "denied"} {
		checkSpan(t, spans[i], "sluice.check", span.KeyPolicy.String("per-ip"), want)
		if spans[i].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Fatalf("check span %d: trace %s, want the caller's", i, spans[i].SpanContext.TraceID())
		}
	}
	checkSpan(t, spans[4], "sluice.peek", span.KeyPolicy.String("per-ip"), "denied")
	checkSpan(t, spans[5], "sluice.usage", span.KeyPolicy.String("per-ip"), "denied")
	if spans[4].Parent.IsValid() {
		t.Fatalf("a request without traceparent got parent %s", spans[4].Parent.SpanID())
	}
}

// TestTraceProxy: on the production stack (memory and Redis), one span per proxied
// request's decision, and traceparent upstream.
func TestTraceProxy(t *testing.T) {
	for _, k := range stores {
		t.Run(k.name, func(t *testing.T) { testTraceProxy(t, k) })
	}
}

func testTraceProxy(t *testing.T, k storeKind) {
	cfg := loadConfig(t, "policies.yaml")
	st := k.open(t, cfg, nil, stack.Options{})
	tp, exp := recorder(t)
	var seen atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("traceparent"))
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	p, err := NewProxy(ProxyOptions{Limiter: st.Limiter(), Upstream: target, Config: cfg, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	base := serveProxy(t, p)
	for i := range 4 {
		rp := do(t, "GET", base+"/things", "", "traceparent", traceparent)
		if want := []int{200, 200, 200, 429}[i]; rp.status != want {
			t.Fatalf("request %d: %d, want %d", i, rp.status, want)
		}
	}
	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans for 4 requests: %v", len(spans), spans)
	}
	for i, want := range []string{"allowed", "allowed", "allowed", "denied"} {
		checkSpan(t, spans[i], "sluice.httplimit", span.KeyPolicy.String("per-ip"), want)
		if spans[i].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || spans[i].Parent.SpanID().String() != "00f067aa0ba902b7" {
			t.Fatalf("span %d: trace %s parent %s, want the client's", i, spans[i].SpanContext.TraceID(), spans[i].Parent.SpanID())
		}
	}
	// The upstream's parent is the third (last allowed) request's decision span.
	want := "00-4bf92f3577b34da6a3ce929d0e0e4736-" + spans[2].SpanContext.SpanID().String() + "-01"
	if got, _ := seen.Load().(string); got != want {
		t.Fatalf("upstream traceparent %q, want %q", got, want)
	}
}

// TestTraceOffAllocs: with no TracerProvider, tracing adds no allocation to a decision.
func TestTraceOffAllocs(t *testing.T) {
	var tr span.Tracer
	n := testing.AllocsPerRun(1000, func() {
		ctx := tr.Extract(context.Background(), nil)
		ctx, sp := tr.Start(ctx, opRLS)
		_ = ctx
		sp.End(span.KeyDomain.String("edge"), evaluator.Outcome{Allowed: true}, nil)
	})
	if n != 0 {
		t.Fatalf("tracing off: %v allocations per decision, want 0", n)
	}
}

// TestTraceStoreFailure: on the Redis stack with Redis killed, a decision's span names the
// failure mode's path and the failure's kind.
func TestTraceStoreFailure(t *testing.T) {
	cfg := loadConfig(t, "policies.yaml", "edge.yaml")
	srv, st := openRedisStack(t, cfg, nil, stack.Options{FailureMode: sluice.FailOpen})
	tp, exp := recorder(t)
	s, err := New(Options{Limiter: st.Limiter(), Ready: st.Ready, Config: cfg, TracerProvider: tp, FailureMode: sluice.FailOpen})
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, s)
	srv.Kill()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitDescriptor{desc("remote_address", "192.0.2.9")}}
	poll.Until(t, 10*time.Second, "a span on the failure mode's path after Redis was killed", func() bool {
		exp.Reset()
		if _, err := r.rls.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		if len(spans) != 1 {
			t.Fatalf("%d spans for one call", len(spans))
		}
		a := attrs(spans[0])
		if a[span.KeyPath].AsString() == "open" {
			if a[span.KeyErrorKind].AsString() == "" || a[span.KeyResult].AsString() != "allowed" {
				t.Fatalf("a decision failed open: span %v, want result allowed and an error kind", spans[0].Attributes)
			}
			return true
		}
		return false
	})
}
