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
// one descriptor, client=c<n> over 100,000 values, from many goroutines. It is the
// per-request work of the service above the transport: allocs/op is the figure to
// watch (wall time on Redis is the round trip, shared by the batch).
func BenchmarkShouldRateLimitStack(b *testing.B) {
	cfg, err := config.Parse(config.File{Name: "bench.yaml", Data: []byte(servicebenchConfig)})
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlsv3.RateLimitRequest, 100_000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitDescriptor{desc("client", "c"+strconv.Itoa(i))}}
	}
	for _, k := range stores {
		b.Run(k.name, func(b *testing.B) {
			reg := prometheus.NewRegistry()
			log := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
			st := k.open(b, cfg, nil, stack.Options{Registry: reg, Logger: log, Sampling: 0, Deadline: 100 * time.Millisecond})
			s, err := New(Options{Limiter: st.Limiter(), Config: cfg, Registry: reg, Logger: log, FailureMode: sluice.FailOpen})
			if err != nil {
				b.Fatal(err)
			}
			var seed atomic.Uint64
			b.SetParallelism(32) // 64 callers on two cores, as servicebench's
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				rng := rand.New(rand.NewPCG(seed.Add(1), 1))
				for pb.Next() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // as gRPC's, from grpc-timeout
					resp, err := s.ShouldRateLimit(ctx, reqs[rng.IntN(len(reqs))])
					cancel()
					if err != nil {
						b.Fatal(err)
					}
					if resp.OverallCode != rlsv3.RateLimitResponse_OK {
						b.Fatalf("over the limit: %v", resp)
					}
				}
			})
		})
	}
}
