package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestServeRedisDialHangs, from outside: serve has lost its Redis connection and every
// new dial hangs (Redis is back but paused, its accept queue full). Many callers at once
// are answered as --failure-mode says, never with an error, and once Redis runs again
// the store decides again. (The breaker opens within the first 50 ms, so most of these
// answers never reach a dial; redisstore's TestStoreSideCancellation is the deterministic
// test of a dial shared by several calls and abandoned with one of them.)
func TestServeRedisDialHangs(t *testing.T) {
	srv := redistest.Start(t, redistest.WithConfig("tcp-backlog", "1"))
	t.Setenv("SLUICE_REDIS_URL", srv.URL())
	_, grpcAddr, _ := started(t, "--failure-mode", "open", "--deadline", "50ms", "--log-level", "error")
	rls := rlsClient(t, grpcAddr)
	ask := func(ip string) (*rlsv3.RateLimitResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "demo",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", ip)}})
	}
	// storeDecides waits until the store decides ip's requests: the demo limit's
	// remaining count goes down from one answer to the next (the failure mode's does not).
	storeDecides := func(what, ip string) {
		t.Helper()
		last := int64(-1)
		poll.Until(t, 20*time.Second, what+": the store deciding", func() bool {
			resp, err := ask(ip)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			r := int64(resp.Statuses[0].GetLimitRemaining())
			decided := last >= 0 && r == last-1
			last = r
			return decided
		})
	}
	storeDecides("with Redis up", "198.51.100.1")

	// Lose the connection, then make every new dial hang: Redis back, paused, with a full
	// accept queue.
	srv.Kill()
	for i := range 5 {
		if _, err := ask(fmt.Sprint("198.51.100.", 10+i)); err != nil {
			t.Fatalf("Redis down: %v", err)
		}
	}
	srv.Restart()
	srv.Pause()
	defer srv.Resume()
	var queued []net.Conn
	defer func() {
		for _, c := range queued {
			c.Close()
		}
	}()
	for {
		c, err := net.DialTimeout("tcp", srv.Addr(), 200*time.Millisecond)
		if err != nil {
			break // full: a dial now hangs
		}
		if queued = append(queued, c); len(queued) > 32 {
			t.Fatal("the paused server's accept queue never filled")
		}
	}

	// 16 callers, each 40 requests 5 ms apart: batches start and end their deadlines at
	// staggered times while the dials hang.
	var wg sync.WaitGroup
	errs := make(chan error, 16*40)
	for c := range 16 {
		wg.Go(func() {
			for i := range 40 {
				resp, err := ask(fmt.Sprintf("203.0.113.%d", c*40%250+i%10))
				switch {
				case err != nil:
					errs <- fmt.Errorf("caller %d, request %d: %v", c, i, err)
				case resp.OverallCode != rlsv3.RateLimitResponse_OK:
					errs <- fmt.Errorf("caller %d, request %d: %v, want OK (failure mode open)", c, i, resp.OverallCode)
				}
				time.Sleep(5 * time.Millisecond) // real-fault test: a steady load while new dials hang
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d requests not answered by the failure mode while dials hung", n, 16*40)
	}
	for _, c := range queued {
		c.Close()
	}
	queued = nil
	srv.Resume()
	storeDecides("after Redis resumed", "198.51.100.2")
}
