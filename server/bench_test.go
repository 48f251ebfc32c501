package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/memory"
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
