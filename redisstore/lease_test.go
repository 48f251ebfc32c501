package redisstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

// TestConcurrencyInFlight: 64 goroutines take leases of one key on a real Redis (on its
// own clock), count the requests in flight themselves while they hold a lease, and
// release it. The count never exceeds the limit, every release of a held lease reports
// true, and the limit is reached (the callers did contend).
func TestConcurrencyInFlight(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL())
	const n, workers, rounds = 5, 64, 40
	limit := sluice.InFlight(n, 10*time.Second)
	ctx := context.Background()
	var inFlight, peak, admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				d, err := s.AllowN(ctx, "inflight", limit, 1)
				if err != nil {
					errs <- err
					return
				}
				if !d.Allowed {
					if d.Lease != 0 || d.RetryAfter <= 0 {
						errs <- fmt.Errorf("denial %+v: want no lease and a RetryAfter", d)
						return
					}
					continue
				}
				admitted.Add(1)
				now := inFlight.Add(1)
				for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
				}
				runtime.Gosched() // the request's work: other callers run while the lease is held
				inFlight.Add(-1)
				held, err := s.Release(ctx, "inflight", limit, d.Lease)
				if err != nil || !held {
					errs <- fmt.Errorf("release of %q: held %v, err %v", d.Lease, held, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p := peak.Load(); p > n || p < n {
		t.Fatalf("peak in flight %d, want exactly the limit %d", p, n)
	}
	if admitted.Load() < n {
		t.Fatalf("only %d admitted", admitted.Load())
	}
	d, err := s.AllowN(ctx, "inflight", limit, 0)
	if err != nil || !d.Allowed || d.Remaining != n {
		t.Fatalf("after every release: %+v, %v; want %d free", d, err, n)
	}
}

// TestReleaseUnknownOrExpired: releasing a lease that expired, was released already or
// was never given reports false and changes nothing; a malformed lease, a limit that is
// not Concurrency and a Concurrency limit without a lease TTL are errors of bad input.
func TestReleaseUnknownOrExpired(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clock := newTestClock()
	s := open(t, srv.URL(), WithClock(clock.Now))
	ctx := context.Background()
	limit := sluice.InFlight(2, time.Second)
	a, err := s.AllowN(ctx, "k", limit, 1)
	if err != nil || !a.Allowed || a.Lease == 0 {
		t.Fatalf("first lease: %+v, %v", a, err)
	}
	clock.Advance(500 * time.Millisecond)
	b, _ := s.AllowN(ctx, "k", limit, 1)
	key := s.Key("k", limit)
	members := func() string {
		v, err := srv.Do("ZRANGE", key, "0", "-1", "WITHSCORES")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := members()
	for _, lease := range []sluice.LeaseID{12345, store.MaxLeaseID} {
		if held, err := s.Release(ctx, "k", limit, lease); held || err != nil {
			t.Fatalf("release of unknown %v: %v, %v", lease, held, err)
		}
	}
	if held, err := s.Release(ctx, "other", limit, a.Lease); held || err != nil {
		t.Fatalf("release under another key: %v, %v", held, err)
	}
	if got := members(); got != before {
		t.Fatalf("unknown releases changed the set:\n%s\nwas\n%s", got, before)
	}
	clock.Advance(500 * time.Millisecond) // a has expired
	if held, err := s.Release(ctx, "k", limit, a.Lease); held || err != nil {
		t.Fatalf("release of an expired lease: %v, %v", held, err)
	}
	if held, _ := s.Release(ctx, "k", limit, b.Lease); !held {
		t.Fatal("release of a held lease reported false")
	}
	if held, _ := s.Release(ctx, "k", limit, b.Lease); held {
		t.Fatal("a second release reported true")
	}
	for _, c := range []struct {
		limit sluice.Limit
		lease sluice.LeaseID
		want  error
	}{
		{limit, 0, sluice.ErrInvalidLease},
		{limit, store.MaxLeaseID + 1, sluice.ErrInvalidLease},
		{sluice.PerSecond(3), b.Lease, sluice.ErrInvalidLimit},
		{sluice.Limit{Algorithm: sluice.Concurrency, Rate: 3}, b.Lease, sluice.ErrInvalidLimit},
	} {
		held, err := s.Release(ctx, "k", c.limit, c.lease)
		if held || !errors.Is(err, c.want) {
			t.Errorf("Release(%v, %v) = %v, %v; want %v", c.limit, c.lease, held, err, c.want)
		}
	}
	if _, err := s.AllowN(ctx, "k", sluice.Limit{Algorithm: sluice.Concurrency, Rate: 3}, 1); !errors.Is(err, sluice.ErrInvalidLimit) || !strings.Contains(err.Error(), "lease") {
		t.Errorf("concurrency limit without lease TTL: %v", err)
	}
	if _, err := s.AllowN(ctx, "k", limit, 2); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Errorf("cost 2 under a concurrency limit: %v", err)
	}
}

// TestLeaseOfKilledHolder: a process that holds the only slot and is killed (SIGKILL,
// so it releases nothing) leaves the slot taken until the lease's TTL has passed on
// Redis's clock, and then it frees by itself.
func TestLeaseOfKilledHolder(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const ttl = 600 * time.Millisecond
	limit := sluice.InFlight(1, ttl)
	start := time.Now()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHolderProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "SLUICE_LEASE_HOLDER="+srv.URL())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	held := false
	for sc := bufio.NewScanner(out); sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "HELD ") {
			held = true
			break
		}
	}
	if !held {
		_ = cmd.Process.Kill()
		t.Fatalf("holder process took no lease: %v", cmd.Wait())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	s := open(t, srv.URL())
	ctx := context.Background()
	d, err := s.AllowN(ctx, "holder", limit, 1)
	if err != nil || d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > ttl {
		t.Fatalf("right after the kill: %+v, %v; want denied, RetryAfter in (0, %v]", d, err, ttl)
	}
	// Wait on the event: the slot frees at the lease's expiry, which the denial names.
	for !d.Allowed {
		time.Sleep(min(d.RetryAfter, 50*time.Millisecond)) // real-fault test: the lease of a killed holder expires on Redis's clock
		if d, err = s.AllowN(ctx, "holder", limit, 1); err != nil {
			t.Fatal(err)
		}
		// A real fault (a killed holder) on Redis's clock, which no test sets: the lease
		// expires at ttl; 10×ttl is the slack for busy cores. The bound below is a lower
		// one, which load cannot break.
		if time.Since(start) > 10*ttl {
			t.Fatalf("slot still taken %v after the holder started", time.Since(start))
		}
	}
	if since := time.Since(start); since < ttl {
		t.Fatalf("slot freed %v after the holder started, before the lease's %v", since, ttl)
	}
}

// TestLeaseHolderProcess is the holder TestLeaseOfKilledHolder starts and kills: it takes
// the slot, says so, and waits to be killed. In an ordinary run it is not a test and
// returns at once (TestLeaseOfKilledHolder is the test).
func TestLeaseHolderProcess(t *testing.T) {
	url := os.Getenv("SLUICE_LEASE_HOLDER")
	if url == "" {
		return
	}
	s, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.AllowN(context.Background(), "holder", sluice.InFlight(1, 600*time.Millisecond), 1)
	if err != nil || !d.Allowed {
		t.Fatalf("holder: %+v, %v", d, err)
	}
	fmt.Printf("HELD %s\n", d.Lease)
	time.Sleep(time.Minute) // real-fault test: the holder process is killed while it sleeps here
}

// TestLeaseAllOrNothing: a concurrency limit layered with a rate limit in one request is
// decided all or nothing: a request the rate limit denies holds no lease, in the memory
// store, on one Redis, and on a Redis Cluster with the two keys in different slots (the
// cross-slot protocol frees the lease it took in one slot when another denies).
func TestLeaseAllOrNothing(t *testing.T) {
	t.Parallel()
	clock := newTestClock()
	mem := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer mem.Close()
	single := open(t, redistest.Start(t).URL(), WithClock(clock.Now))
	cl := redistest.StartCluster(t)
	cluster := open(t, clusterURL(cl), WithClock(clock.Now))
	// Identities in different slots: the rate limit's key and the lease's.
	a, b := "tenant:a", "tenant:b"
	for i := 0; idSlot(a) == idSlot(b); i++ {
		b = fmt.Sprintf("tenant:b%d", i)
	}
	ctx := context.Background()
	inflight := sluice.InFlight(3, time.Minute)
	rate := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour}
	for name, lim := range map[string]sluice.Limiter{"memory": mem, "redis": single, "cluster": cluster} {
		t.Run(name, func(t *testing.T) {
			reqs := []sluice.Request{{Key: a + name, Limit: rate, N: 1}, {Key: b + name, Limit: inflight, N: 1}}
			ds, err := sluice.AllowMulti(ctx, lim, reqs)
			if err != nil || !ds[0].Allowed || !ds[1].Allowed || ds[1].Lease == 0 || ds[0].Lease != 0 {
				t.Fatalf("first request: %+v, %v", ds, err)
			}
			for i := 0; i < 3; i++ {
				ds, err = sluice.AllowMulti(ctx, lim, reqs)
				if err != nil || ds[0].Allowed || ds[1].Allowed || ds[1].Lease != 0 || ds[1].RetryAfter != 0 || ds[1].Remaining != 2 {
					t.Fatalf("request %d denied by the rate limit: %+v, %v; want no lease, 2 slots free", i+2, ds, err)
				}
			}
			d, err := sluice.AllowN(ctx, lim, b+name, inflight, 0)
			if err != nil || d.Remaining != 2 {
				t.Fatalf("slots after the denials: %+v, %v; want 2 free", d, err)
			}
		})
	}
}
