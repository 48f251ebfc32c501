package stack_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/stack"
)

// shape is one stack stack.Open can build.
type shape struct {
	name      string
	redis     bool
	denyCache bool
	mode      sluice.FailureMode // the default failure mode (Redis only)
}

func shapes() []shape {
	out := []shape{
		{name: "memory", denyCache: true},
		{name: "memory without deny cache"},
	}
	for _, dc := range []bool{true, false} {
		for _, m := range []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
			name := "redis " + m.String()
			if !dc {
				name += " without deny cache"
			}
			out = append(out, shape{name: name, redis: true, denyCache: dc, mode: m})
		}
	}
	return out
}

// open builds s with the clock c; srv is its redis-server (nil on memory).
func (s shape) open(t *testing.T, c *clocktest.Clock) (*stack.Stack, *redistest.Server) {
	t.Helper()
	o := stack.Options{Clock: c.Now, DenyCache: stack.DenyCache{Off: !s.denyCache}, FailureMode: s.mode}
	var srv *redistest.Server
	if s.redis {
		srv = redistest.Start(t)
		// Generous: the tests share two cores, and a slow answer must not count as a
		// store failure.
		o.RedisURL, o.Deadline = srv.URL(), 2*time.Second
	}
	st, err := stack.Open(nil, o)
	if err != nil {
		t.Fatalf("stack.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if want := map[bool]string{false: "memory", true: "redis"}[s.redis]; st.Kind() != want {
		t.Fatalf("Kind %q, want %q", st.Kind(), want)
	}
	if err := st.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	return st, srv
}

// decide decides reqs with lim and returns the decisions.
func decide(t *testing.T, lim sluice.Limiter, reqs ...sluice.Request) ([]sluice.Decision, sluice.Report, error) {
	t.Helper()
	ds := make([]sluice.Decision, len(reqs))
	rep, err := lim.Decide(context.Background(), reqs, ds)
	return ds, rep, err
}

// allOrNothing runs a request of two limits to exhaustion of the first, on path: the
// request passes while both fit; denied, it spends nothing of the second, whose
// decision says it alone would pass.
func allOrNothing(t *testing.T, lim sluice.Limiter, path sluice.Path, a, b string) {
	t.Helper()
	two := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Minute}
	five := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: time.Minute}
	reqs := []sluice.Request{{Key: a, Limit: two, N: 1, Policy: "a"}, {Key: b, Limit: five, N: 1, Policy: "b"}}
	for i, want := range [][2]int64{{1, 4}, {0, 3}} {
		ds, _, err := decide(t, lim, reqs...)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		for j, d := range ds {
			if !d.Allowed || d.Remaining != want[j] || d.Path != path {
				t.Fatalf("request %d, limit %d: %+v, want allowed with %d remaining on path %v", i+1, j, d, want[j], path)
			}
		}
	}
	for i := range 2 {
		ds, _, err := decide(t, lim, reqs...)
		if err != nil {
			t.Fatalf("denied request %d: %v", i+1, err)
		}
		if ds[0].Allowed || ds[0].RetryAfter <= 0 || ds[0].Path != path {
			t.Fatalf("denied request %d, first limit: %+v, want denied with a wait on path %v", i+1, ds[0], path)
		}
		if ds[1].Allowed || ds[1].RetryAfter != 0 || ds[1].Remaining != 3 || ds[1].Path != path {
			t.Fatalf("denied request %d, second limit: %+v, want not allowed, RetryAfter 0 (it alone would pass), 3 remaining", i+1, ds[1])
		}
	}
	d, err := sluice.AllowN(context.Background(), lim, b, five, 1)
	if err != nil || !d.Allowed || d.Remaining != 2 || d.Path != path {
		t.Fatalf("the second limit alone after two denials: %+v, %v; want allowed with 2 remaining (the denials spent nothing)", d, err)
	}
}

// TestStackShapes: every stack stack.Open builds (memory with and without deny cache;
// Redis with and without, each failure mode) keeps the contract of sluice.Limiter: a
// request of several limits is decided all or nothing, reservations pace (and a
// cancelled one gives its units back), Reset forgets. On Redis, with the server gone,
// the failure mode decides, all or nothing too, and each request's own Failure beats the
// stack's default.
func TestStackShapes(t *testing.T) {
	ctx := context.Background()
	for _, s := range shapes() {
		t.Run(s.name, func(t *testing.T) {
			c := clocktest.New(time.Date(2030, 1, 1, 0, 0, 20, 0, time.UTC))
			st, srv := s.open(t, c)
			lim := st.Limiter()

			t.Run("all or nothing", func(t *testing.T) {
				allOrNothing(t, lim, sluice.PathStore, "a", "b")
			})

			t.Run("a repeated denial", func(t *testing.T) {
				two := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Minute}
				want := sluice.PathStore
				if s.denyCache {
					// The cache answers the repeat of a denial, also of one it learned
					// from a request of several limits (the denials of "a" above).
					want = sluice.PathCache
				}
				for i, path := range []sluice.Path{want, want} {
					d, err := sluice.AllowN(ctx, lim, "a", two, 1)
					if err != nil || d.Allowed || d.RetryAfter != 40*time.Second || d.Remaining != 0 || d.Path != path {
						t.Fatalf("denial %d of a: %+v, %v; want denied for 40s on path %v", i+1, d, err, path)
					}
				}
				for range 2 {
					if d, err := sluice.AllowN(ctx, lim, "c", two, 1); err != nil || !d.Allowed {
						t.Fatalf("c: %+v, %v", d, err)
					}
				}
				for i, path := range []sluice.Path{sluice.PathStore, want} {
					d, err := sluice.AllowN(ctx, lim, "c", two, 1)
					if err != nil || d.Allowed || d.RetryAfter != 40*time.Second || d.Remaining != 0 || d.Path != path {
						t.Fatalf("denial %d: %+v, %v; want denied for 40s on path %v", i+1, d, err, path)
					}
				}
			})

			t.Run("reservations", func(t *testing.T) {
				limit := sluice.PerSecond(1) // GCRA, one unit a second, burst 1
				if err := sluice.Wait(ctx, lim, "r", limit, 1); err != nil {
					t.Fatalf("Wait for the burst: %v", err)
				}
				// The clock stands still: the next unit is a second away.
				wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
				err := sluice.Wait(wctx, lim, "r", limit, 1)
				cancel()
				if !errors.Is(err, sluice.ErrWaitExceedsDeadline) {
					t.Fatalf("Wait beyond its deadline: %v, want ErrWaitExceedsDeadline", err)
				}
				res, err := lim.Reserve(ctx, "r", limit, 1)
				if err != nil || !res.OK || res.Delay != time.Second {
					t.Fatalf("Reserve: %+v, %v; want OK a second ahead (the refused Wait spent nothing)", res, err)
				}
				d, err := sluice.AllowN(ctx, lim, "r", limit, 0)
				if err != nil || d.Allowed || d.RetryAfter != 2*time.Second {
					t.Fatalf("a look behind the reservation: %+v, %v; want a wait of 2s", d, err)
				}
				if ok, err := res.Cancel(ctx); err != nil || !ok {
					t.Fatalf("Cancel: %v, %v; want the units back", ok, err)
				}
				d, err = sluice.AllowN(ctx, lim, "r", limit, 1)
				if err != nil || d.Allowed || d.RetryAfter != time.Second || d.Path != sluice.PathStore {
					t.Fatalf("after the cancel: %+v, %v; want the store's denial for 1s (the cancelled unit is back)", d, err)
				}
				if _, err := lim.Reserve(ctx, "w", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Second}, 1); !errors.Is(err, sluice.ErrInvalidLimit) {
					t.Fatalf("Reserve on a window limit: %v, want ErrInvalidLimit", err)
				}
			})

			t.Run("a cancel voids a remembered denial", func(t *testing.T) {
				// A cancelled reservation gives back units that a denial made behind it
				// lacked: the denial no longer holds, and the next decision must be the
				// store's, not a remembered denial that outlived the cancel.
				limit := sluice.PerSecond(1)
				if d, err := sluice.AllowN(ctx, lim, "v", limit, 1); err != nil || !d.Allowed {
					t.Fatalf("the burst: %+v, %v", d, err)
				}
				res, err := lim.Reserve(ctx, "v", limit, 1)
				if err != nil || !res.OK || res.Delay != time.Second {
					t.Fatalf("Reserve: %+v, %v; want OK a second ahead", res, err)
				}
				d, err := sluice.AllowN(ctx, lim, "v", limit, 1)
				if err != nil || d.Allowed || d.RetryAfter != 2*time.Second {
					t.Fatalf("a decision behind the reservation: %+v, %v; want denied for 2s", d, err)
				}
				if ok, err := res.Cancel(ctx); err != nil || !ok {
					t.Fatalf("Cancel: %v, %v; want the units back", ok, err)
				}
				d, err = sluice.AllowN(ctx, lim, "v", limit, 1)
				if err != nil || d.Allowed || d.RetryAfter != time.Second || d.Path != sluice.PathStore {
					t.Errorf("after the cancel: %+v, %v; want the store's denial for 1s (the cancelled unit is back)", d, err)
				}
				// A cancelled reservation gives back units that a denial made behind it
				// lacked: the denial no longer holds, and the next decision is the
				// store's (a remembered denial must not outlive the cancel).
				burst := sluice.PerSecond(1).WithBurst(3)
				if d, err := sluice.AllowN(ctx, lim, "q", burst, 2); err != nil || !d.Allowed || d.Remaining != 1 {
					t.Fatalf("2 of a burst of 3: %+v, %v", d, err)
				}
				res, err = lim.Reserve(ctx, "q", burst, 3)
				if err != nil || !res.OK || res.Delay != 2*time.Second {
					t.Fatalf("Reserve of the whole burst: %+v, %v; want OK 2s ahead", res, err)
				}
				if d, err := sluice.AllowN(ctx, lim, "q", burst, 1); err != nil || d.Allowed {
					t.Fatalf("a decision behind the reservation: %+v, %v; want denied", d, err)
				}
				if ok, err := res.Cancel(ctx); err != nil || !ok {
					t.Fatalf("Cancel: %v, %v; want the units back", ok, err)
				}
				if d, err := sluice.AllowN(ctx, lim, "q", burst, 1); err != nil || !d.Allowed || d.Remaining != 0 || d.Path != sluice.PathStore {
					t.Errorf("after the cancel: %+v, %v; want the store's allowance of the unit left before the reservation", d, err)
				}
			})

			t.Run("reset", func(t *testing.T) {
				two := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Minute}
				if err := lim.Reset(ctx, "a", two); err != nil {
					t.Fatalf("Reset: %v", err)
				}
				d, err := sluice.AllowN(ctx, lim, "a", two, 1)
				if err != nil || !d.Allowed || d.Remaining != 1 || d.Path != sluice.PathStore {
					t.Fatalf("after Reset: %+v, %v; want allowed by the store with 1 remaining (a remembered denial is forgotten)", d, err)
				}
				if err := lim.Reset(ctx, "r", sluice.PerSecond(1)); err != nil {
					t.Fatalf("Reset of a reserved key: %v", err)
				}
				if err := sluice.Wait(ctx, lim, "r", sluice.PerSecond(1), 1); err != nil {
					t.Fatalf("Wait after Reset: %v", err)
				}
			})

			if !s.redis {
				return
			}
			t.Run("store down", func(t *testing.T) {
				// A denial remembered before Redis went away (the deny cache answers it
				// while the store is down, without asking it).
				one := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Minute}
				for range 2 {
					sluice.AllowN(ctx, lim, "held", one, 1)
				}
				srv.Kill()
				if s.denyCache {
					d, err := sluice.AllowN(ctx, lim, "held", one, 1)
					if err != nil || d.Allowed || d.Path != sluice.PathCache {
						t.Fatalf("a remembered denial with Redis down: %+v, %v; want the cache's denial", d, err)
					}
				}
				switch s.mode {
				case sluice.FailOpen:
					ds, rep, err := decide(t, lim,
						sluice.Request{Key: "x", Limit: sluice.PerMinute(1), N: 1}, sluice.Request{Key: "y", Limit: sluice.PerMinute(1), N: 1})
					if err != nil || !ds[0].Allowed || !ds[1].Allowed || ds[0].Path != sluice.PathOpen || rep.Failure == nil {
						t.Fatalf("open with Redis down: %+v %+v, %v", ds, rep, err)
					}
				case sluice.FailClosed:
					ds, rep, err := decide(t, lim,
						sluice.Request{Key: "x", Limit: sluice.PerMinute(1), N: 1}, sluice.Request{Key: "y", Limit: sluice.PerMinute(1), N: 1})
					if !errors.Is(err, sluice.ErrStoreUnavailable) || ds[0].Allowed || ds[1].Allowed || ds[0].Path != sluice.PathClosed || rep.Failure == nil {
						t.Fatalf("closed with Redis down: %+v %+v, %v", ds, rep, err)
					}
				case sluice.FailLocal:
					allOrNothing(t, lim, sluice.PathLocal, "a", "b")
				}
				// A request's own Failure beats the stack's default.
				ds, _, err := decide(t, lim, sluice.Request{Key: "z", Limit: sluice.PerMinute(1), N: 1, Failure: sluice.Failure{Mode: sluice.FailClosed}})
				if !errors.Is(err, sluice.ErrStoreUnavailable) || ds[0].Path != sluice.PathClosed {
					t.Fatalf("a request failing closed with Redis down: %+v, %v", ds, err)
				}
				if s.mode != sluice.FailClosed {
					ds, _, err := decide(t, lim, sluice.Request{Key: "z", Limit: sluice.PerMinute(1), N: 1, Shadow: true, Failure: sluice.Failure{Mode: sluice.FailClosed}})
					if err != nil || !ds[0].Allowed || ds[0].Path != sluice.PathOpen {
						t.Fatalf("a shadow request with Redis down: %+v, %v; want it failed open", ds, err)
					}
				}
				if _, err := lim.Reserve(ctx, "r2", sluice.PerSecond(1), 1); !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Fatalf("Reserve with Redis down: %v, want ErrStoreUnavailable", err)
				}
				if err := lim.Reset(ctx, "a", sluice.PerMinute(1)); !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Fatalf("Reset with Redis down: %v, want ErrStoreUnavailable", err)
				}
				if err := st.Ready(ctx); err == nil {
					t.Fatal("Ready with Redis down")
				}
			})
		})
	}
}

// TestOpenBoundsMemoryByDefault: the memory store the service runs is bounded unless asked
// not to be (issue 20, item 11).
func TestOpenBoundsMemoryByDefault(t *testing.T) {
	for _, tt := range []struct {
		maxKeys, want int64
	}{{0, stack.DefaultMaxKeys}, {500, 500}, {-1, 0}} {
		st, err := stack.Open(nil, stack.Options{MaxKeys: tt.maxKeys})
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Store.(*memory.Store).MaxKeys(); got != tt.want {
			t.Errorf("Options.MaxKeys %d: the store's bound is %d, want %d", tt.maxKeys, got, tt.want)
		}
		st.Close()
	}
}

// TestRedisOneCallInFlight: the stack's Redis store keeps one script call in flight per
// server (stack.ServiceConcurrency), so that under load each call carries more decisions;
// Options.RedisOptions overrides it. Decisions from many goroutines at once are all the
// store's, each counted once.
func TestRedisOneCallInFlight(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		opts []redisstore.Option
		want int
	}{
		{nil, 1},
		{[]redisstore.Option{redisstore.WithConcurrency(3)}, 3},
	} {
		st, err := stack.Open(nil, stack.Options{RedisURL: srv.URL(), Deadline: 2 * time.Second, RedisOptions: tc.opts})
		if err != nil {
			t.Fatalf("stack.Open: %v", err)
		}
		if got := st.Store.(*redisstore.Store).Concurrency(); got != tc.want {
			t.Errorf("RedisOptions %d: %d script calls in flight, want %d", len(tc.opts), got, tc.want)
		}
		limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 64 {
			wg.Go(func() {
				for i := range 10 {
					d, err := sluice.AllowN(context.Background(), st.Limiter(), fmt.Sprintf("c%d-%d", len(tc.opts), i), limit, 1)
					if err == nil && (d.Path != sluice.PathStore || !d.Allowed) {
						err = fmt.Errorf("goroutine %d, key %d: %+v, want allowed by the store", g, i, d)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for i := range 10 {
			d, err := sluice.AllowN(context.Background(), st.Limiter(), fmt.Sprintf("c%d-%d", len(tc.opts), i), limit, 0)
			if err != nil || d.Remaining != 1000-64 {
				t.Errorf("key %d: %+v, %v; want 64 spent", i, d, err)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
