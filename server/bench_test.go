package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/denycache"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/procstat"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/observe"
	"github.com/sluicehq/sluice/stack"
)

// BenchmarkShouldRateLimit measures ShouldRateLimit over a real gRPC connection on
// loopback, in-memory store, distinct descriptors, parallel callers.
func BenchmarkShouldRateLimit(b *testing.B) {
	store := memory.New()
	defer store.Close()
	cfg := loadConfig(b, "edge.yaml")
	s, err := New(Options{Limiter: store, Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	r := serve(b, s)
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			_, err := r.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
				Descriptors: []*ratelimitDescriptor{desc("message_type", "marketing", "to_number", fmt.Sprint(i%10000))}})
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCheck measures POST /v1/check over real HTTP on loopback.
func BenchmarkCheck(b *testing.B) {
	store := memory.New()
	defer store.Close()
	s, err := New(Options{Limiter: store, Config: loadConfig(b, "edge.yaml")})
	if err != nil {
		b.Fatal(err)
	}
	r := serve(b, s)
	var n atomic.Int64
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			body := fmt.Sprintf(`{"domain":"edge","descriptors":[{"entries":[{"key":"message_type","value":"marketing"},{"key":"to_number","value":"%d"}]}]}`, i%10000)
			rp, err := client.Post(r.base+"/v1/check", "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, rp.Body)
			rp.Body.Close()
		}
	})
}

// BenchmarkShouldRateLimitDirect measures the server's own work for one request,
// without gRPC: matching, the store decision, the response and its headers.
func BenchmarkShouldRateLimitDirect(b *testing.B) {
	store := memory.New()
	defer store.Close()
	s, err := New(Options{Limiter: store, Config: loadConfig(b, "edge.yaml")})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitDescriptor{desc("message_type", "marketing", "to_number", fmt.Sprint(i))}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := s.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkShouldRateLimitChain measures ShouldRateLimit without gRPC through the chain
// `sluice serve` builds on Redis (package stack: observe with metrics and a disabled
// decision log -> failover with inline calls -> denycache -> store), with the memory
// store as the store so that the figure is the server's and the decorators' own work.
// (stack.Open leaves failover out on memory, so the chain is built here.)
func BenchmarkShouldRateLimitChain(b *testing.B) {
	store := memory.New()
	defer store.Close()
	reg := prometheus.NewRegistry()
	m, err := observe.NewMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	fl := failover.New(denycache.New(store), failover.WithInlineCalls(), failover.WithDeadline(100*time.Millisecond))
	defer fl.Close()
	lim := observe.New(fl, observe.WithMetrics(m), observe.WithSampling(0),
		observe.WithLogger(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))))
	s, err := New(Options{Limiter: lim, Config: loadConfig(b, "edge.yaml"), Registry: reg, FailureMode: sluice.FailOpen})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitDescriptor{desc("api", fmt.Sprint(i))}}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // as gRPC's, from grpc-timeout
			if _, err := s.ShouldRateLimit(ctx, reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
			cancel()
			i++
		}
	})
}

// BenchmarkShouldRateLimitTraced measures ShouldRateLimit without gRPC on the memory
// store with tracing off (no TracerProvider) and on (an SDK provider that samples every
// span and drops it: the cost of recording, not of exporting).
func BenchmarkShouldRateLimitTraced(b *testing.B) {
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", nil},
		{"on", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store := memory.New()
			defer store.Close()
			s, err := New(Options{Limiter: store, Config: loadConfig(b, "edge.yaml"), TracerProvider: bc.tp})
			if err != nil {
				b.Fatal(err)
			}
			req := &rlsv3.RateLimitRequest{Domain: "edge",
				Descriptors: []*ratelimitDescriptor{desc("message_type", "marketing", "to_number", "1")}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ShouldRateLimit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// servicebenchConfig is bench/cmd/servicebench's domain: a fixed window per client
// generous enough that every request is a store decision and is allowed.
const servicebenchConfig = `domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 1000
`

// BenchmarkShouldRateLimitStack measures ShouldRateLimit without gRPC on the stack
// `sluice serve` runs (stack.Open, its decision log at error level and unsampled, its
// metrics), on memory and on a redis-server of its own, with servicebench's request:
// one descriptor, client=c<n> over 100,000 values, from 64 goroutines. It is the
// per-request work of the service above the transport. Besides allocs/op it reports
// the CPU time per request of this process (cpu-µs/op, getrusage: the callers, the
// stack and the Redis client's goroutines), its threads' context switches per request
// (ctxsw/op), and on Redis of redis-server (redis-µs/op,
// INFO cpu) and the decisions each script call carried (decisions/call, INFO
// commandstats): figures that move less with the machine's load than ns/op, which on
// Redis is the round trip shared by a batch.
func BenchmarkShouldRateLimitStack(b *testing.B) {
	for _, kind := range []string{"memory", "redis"} {
		b.Run(kind, func(b *testing.B) {
			sb := newStackBench(b, kind)
			var seed atomic.Uint64
			b.SetParallelism(32) // 64 callers on two cores, as servicebench's
			b.ReportAllocs()
			var calls0 int64
			var redis0 float64
			if sb.srv != nil {
				calls0, _ = sb.srv.ScriptStats()
				redis0 = redisCPU(b, sb.srv)
			}
			cpu0, cs0 := procstat.CPU(), procstat.ContextSwitches(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 1))
				for pb.Next() {
					sb.decide(b, rng)
				}
			})
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64((procstat.CPU()-cpu0).Microseconds())/n, "cpu-µs/op")
			b.ReportMetric(float64(procstat.ContextSwitches(b)-cs0)/n, "ctxsw/op")
			if store, all := storeDecisions(b, sb.reg); store < all {
				// Decisions a failure mode made (a missed deadline, an open breaker) are
				// not the store path this measures.
				b.Errorf("the store made %.0f of %.0f decisions", store, all)
			}
			if sb.srv != nil {
				b.ReportMetric((redisCPU(b, sb.srv)-redis0)*1e6/n, "redis-µs/op")
				if calls, _ := sb.srv.ScriptStats(); calls > calls0 {
					b.ReportMetric(n/float64(calls-calls0), "decisions/call")
				}
			}
		})
	}
}

// BenchmarkShouldRateLimitStackSerial is BenchmarkShouldRateLimitStack/memory from one
// goroutine, for instruction counts: callgrind's --toggle-collect on ShouldRateLimit
// follows one goroutine's calls, which 64 goroutines switching inside them would confuse.
func BenchmarkShouldRateLimitStackSerial(b *testing.B) {
	sb := newStackBench(b, "memory")
	rng := rand.New(rand.NewPCG(1, 1))
	b.ReportAllocs()
	for b.Loop() {
		sb.decide(b, rng)
	}
}

// stackBench is a Server on the stack `sluice serve` runs (stack.Open, its decision log
// at error level and unsampled, its metrics in reg), on memory or on a redis-server of its
// own (srv), with servicebench's configuration and requests: one descriptor, client=c<n>
// over 100,000 values.
type stackBench struct {
	s    *Server
	reg  *prometheus.Registry
	srv  *redistest.Server // nil on memory
	reqs []*rlsv3.RateLimitRequest
}

// newStackBench builds the stackBench of kind, memory or redis, and makes its first
// decision (which loads the script on Redis).
func newStackBench(b *testing.B, kind string) *stackBench {
	cfg, err := config.Parse(config.File{Name: "bench.yaml", Data: []byte(servicebenchConfig)})
	if err != nil {
		b.Fatal(err)
	}
	sb := &stackBench{reg: prometheus.NewRegistry(), reqs: make([]*rlsv3.RateLimitRequest, 100_000)}
	for i := range sb.reqs {
		sb.reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitDescriptor{desc("client", "c"+strconv.Itoa(i))}}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	// The tests' generous deadline (a shared machine): every decision is the store's.
	o := stack.Options{Registry: sb.reg, Logger: log, Sampling: 0, Deadline: testDeadline}
	var st *stack.Stack
	if kind == "redis" {
		sb.srv, st = openRedisStack(b, cfg, nil, o)
	} else {
		st = openStack(b, cfg, o)
	}
	if sb.s, err = New(Options{Limiter: st.Limiter(), Config: cfg, Registry: sb.reg, Logger: log, FailureMode: sluice.FailOpen}); err != nil {
		b.Fatal(err)
	}
	if _, err := sb.s.ShouldRateLimit(context.Background(), sb.reqs[0]); err != nil {
		b.Fatal(err)
	}
	return sb
}

// decide asks for one of the requests, drawn with rng, with a deadline as gRPC's (from
// grpc-timeout), and fails b unless it is allowed.
func (sb *stackBench) decide(b *testing.B, rng *rand.Rand) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	resp, err := sb.s.ShouldRateLimit(ctx, sb.reqs[rng.IntN(len(sb.reqs))])
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		b.Fatalf("over the limit: %v", resp)
	}
}

// storeDecisions returns the decisions of sluice_decisions_total that the store made
// (path store) and all of them.
func storeDecisions(b *testing.B, reg *prometheus.Registry) (store, all float64) {
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			all += v
			for _, l := range m.GetLabel() {
				if l.GetName() == "path" && l.GetValue() == "store" {
					store += v
				}
			}
		}
	}
	return store, all
}

// redisCPU is the CPU time srv has used, in seconds (INFO cpu).
func redisCPU(b *testing.B, srv *redistest.Server) float64 {
	var total float64
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := srv.Info(f)
		if err != nil {
			b.Fatal(err)
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			b.Fatal(err)
		}
		total += x
	}
	return total
}
