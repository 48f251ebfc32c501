package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestServeStartsWithRedisDown: serve starts while its Redis is down, answers by its
// failure mode (open: OK) at once, reports not ready, and decides on Redis once it is up.
func TestServeStartsWithRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	t.Setenv("SLUICE_REDIS_URL", srv.URL())
	base, grpcAddr, _ := started(t, "--failure-mode", "open", "--deadline", "50ms", "--log-level", "warn")
	rls := rlsClient(t, grpcAddr)
	req := func(i int) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "demo", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", fmt.Sprint("203.0.113.", i))}}
	}

	start := time.Now()
	resp, err := rls.ShouldRateLimit(context.Background(), req(1))
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with Redis down, fail open: %v %v", resp, err)
	}
	t.Logf("with Redis down: %v", resp)
	// A real fault (a killed Redis): the answer comes at the 50ms deadline or before;
	// 1s of slack is scheduling on busy cores.
	if d := time.Since(start); d > time.Second {
		t.Errorf("answer with Redis down took %v", d)
	}
	r, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode == http.StatusOK {
		t.Fatalf("/readyz with Redis down: %d %s", r.StatusCode, body)
	}

	srv.Restart()
	i := 0
	// The built-in demo policy allows 100 per second: 99 left means the store decided.
	poll.Until(t, 15*time.Second, "serve deciding on Redis after Redis started", func() bool {
		resp, err := rls.ShouldRateLimit(context.Background(), req(10+i))
		i++
		return err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK && resp.Statuses[0].LimitRemaining == 99
	})
	r, err = http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		t.Fatalf("/readyz with Redis up: %d %s", r.StatusCode, strings.TrimSpace(string(body)))
	}
}
