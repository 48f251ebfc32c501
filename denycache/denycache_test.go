package denycache

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

func newClock() *clocktest.Clock { return clocktest.New(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)) }

// counting counts the requests that reach the store.
type counting struct {
	sluice.Limiter
	calls atomic.Int64
}

func (c *counting) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	c.calls.Add(1)
	return c.Limiter.Decide(ctx, reqs, ds)
}

// setup returns a Cache over a memory store, the store (counting its calls) and their
// clock.
func setup(t *testing.T, opts ...Option) (*Cache, *counting, *clocktest.Clock) {
	t.Helper()
	clk := newClock()
	m := memory.New(memory.WithClock(clk.Now))
	t.Cleanup(func() { m.Close() })
	inner := &counting{Limiter: m}
	return New(inner, append([]Option{WithClock(clk.Now)}, opts...)...), inner, clk
}

// TestMatchesTheStore is the Cache's correctness property: over long random traffic, for
// every algorithm, a Cache over a store decides exactly as a second store fed the same
// requests (Allowed, RetryAfter, ResetAfter), while answering a good share of the denials
// itself. Remaining from the Cache is the figure at the denial, never above the store's.
func TestMatchesTheStore(t *testing.T) {
	ctx := context.Background()
	for _, a := range store.Algorithms() {
		for _, maxAge := range []time.Duration{time.Hour, 7 * time.Millisecond} {
			t.Run(fmt.Sprintf("%v/maxAge=%v", a, maxAge), func(t *testing.T) {
				c, inner, clk := setup(t, WithMaxAge(maxAge))
				plain := memory.New(memory.WithClock(clk.Now))
				defer plain.Close()
				limit := sluice.Limit{Algorithm: a, Rate: 10, Period: 100 * time.Millisecond, Burst: 4}
				rng := rand.New(rand.NewPCG(7, uint64(a)))
				keys := []string{"a", "b", "c"}
				var hits, denials, asked int
				const ops = 20000
				for i := range ops {
					switch r := rng.IntN(100); {
					case r == 0:
						clk.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
					case r < 50:
						clk.Advance(time.Duration(rng.IntN(4000)) * time.Microsecond)
					}
					key := keys[rng.IntN(len(keys))]
					if rng.IntN(1000) == 0 {
						if err := plain.Reset(ctx, key, limit); err != nil {
							t.Fatal(err)
						}
						if err := c.Reset(ctx, key, limit); err != nil {
							t.Fatal(err)
						}
						continue
					}
					n := int64(1 + rng.IntN(2))
					if rng.IntN(50) == 0 {
						n = 0
					}
					want, err := plain.AllowN(ctx, key, limit, n)
					if err != nil {
						t.Fatal(err)
					}
					before := inner.calls.Load()
					got, err := c.AllowN(ctx, key, limit, n)
					if err != nil {
						t.Fatal(err)
					}
					cached := got.Path == sluice.PathCache
					if cached != (inner.calls.Load() == before) {
						t.Fatalf("op %d: Path %v but the store was asked %d times", i, got.Path, inner.calls.Load()-before)
					}
					if got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter || got.ResetAfter != want.ResetAfter || got.Limit != want.Limit {
						t.Fatalf("op %d (%s, n=%d): cache %+v, store %+v", i, key, n, got, want)
					}
					if cached && got.Remaining > want.Remaining || !cached && got.Remaining != want.Remaining {
						t.Fatalf("op %d (%s, n=%d): Remaining %d from %v, the store says %d", i, key, n, got.Remaining, got.Path, want.Remaining)
					}
					if !want.Allowed && want.RetryAfter > 0 {
						denials++
					}
					if cached {
						hits++
					} else {
						asked++
					}
				}
				t.Logf("%d denials, %d answered by the cache, %d store calls", denials, hits, asked)
				if hits < denials/5 {
					t.Errorf("the cache answered %d of %d denials: it is not doing its job", hits, denials)
				}
			})
		}
	}
}

// A client hammering a key over its limit reaches the store once per denial's life.
func TestHammeringCostsOneStoreCall(t *testing.T) {
	ctx := context.Background()
	c, inner, clk := setup(t)
	limit := sluice.PerSecond(5)
	for range 5 {
		if d, _ := c.AllowN(ctx, "k", limit, 1); !d.Allowed {
			t.Fatal("denied within the burst")
		}
	}
	first, err := c.AllowN(ctx, "k", limit, 1)
	if err != nil || first.Allowed || first.RetryAfter != 200*time.Millisecond || first.Path != sluice.PathStore {
		t.Fatalf("first denial: %+v, %v", first, err)
	}
	calls := inner.calls.Load()
	for i := range 2500 {
		clk.Advance(100 * time.Microsecond)
		d, err := c.AllowN(ctx, "k", limit, 1)
		if err != nil {
			t.Fatal(err)
		}
		elapsed := time.Duration(i+1) * 100 * time.Microsecond
		if elapsed < 200*time.Millisecond {
			want := sluice.Decision{Limit: limit, Remaining: first.Remaining, ResetAfter: first.ResetAfter - elapsed, RetryAfter: first.RetryAfter - elapsed, Path: sluice.PathCache}
			if d != want {
				t.Fatalf("after %v: %+v, want %+v", elapsed, d, want)
			}
			continue
		}
		if !d.Allowed || d.Path != sluice.PathStore {
			t.Fatalf("after %v, past the denial's RetryAfter: %+v", elapsed, d)
		}
		break
	}
	if got := inner.calls.Load() - calls; got != 1 {
		t.Errorf("%d store calls over the denial's life, want 1 (the one that allowed)", got)
	}
}

// MaxAge bounds how long a denial answers without the store, however long its RetryAfter.
func TestMaxAge(t *testing.T) {
	ctx := context.Background()
	c, inner, clk := setup(t, WithMaxAge(time.Second))
	limit := sluice.PerDay(1)
	c.AllowN(ctx, "k", limit, 1)
	if d, _ := c.AllowN(ctx, "k", limit, 1); d.Allowed || d.Path != sluice.PathStore {
		t.Fatalf("second request: %+v", d)
	}
	calls := inner.calls.Load()
	clk.Advance(time.Second - time.Microsecond)
	if d, _ := c.AllowN(ctx, "k", limit, 1); d.Path != sluice.PathCache || d.RetryAfter != 24*time.Hour-time.Second+time.Microsecond {
		t.Fatalf("within MaxAge: %+v", d)
	}
	clk.Advance(time.Microsecond)
	if d, _ := c.AllowN(ctx, "k", limit, 1); d.Allowed || d.Path != sluice.PathStore {
		t.Fatalf("at MaxAge: %+v, want the store's denial", d)
	}
	if d, _ := c.AllowN(ctx, "k", limit, 1); d.Path != sluice.PathCache {
		t.Fatalf("after the store denied again: %+v, want it remembered", d)
	}
	if got := inner.calls.Load() - calls; got != 1 {
		t.Errorf("%d store calls, want 1", got)
	}
}

// Only the cost that was denied is answered; another cost asks the store.
func TestOtherCostsAskTheStore(t *testing.T) {
	ctx := context.Background()
	c, inner, _ := setup(t)
	limit := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 10, Period: time.Second}
	c.AllowN(ctx, "k", limit, 8)
	if d, _ := c.AllowN(ctx, "k", limit, 3); d.Allowed || d.Remaining != 2 {
		t.Fatalf("cost 3 with 2 left: %+v", d)
	}
	calls := inner.calls.Load()
	if d, _ := c.AllowN(ctx, "k", limit, 3); d.Path != sluice.PathCache {
		t.Fatalf("cost 3 again: %+v", d)
	}
	if d, _ := c.AllowN(ctx, "k", limit, 4); d.Allowed || d.Path != sluice.PathStore {
		t.Fatalf("cost 4: %+v", d)
	}
	// The denial of 4 replaced that of 3.
	if d, _ := c.AllowN(ctx, "k", limit, 3); d.Allowed || d.Path != sluice.PathStore {
		t.Fatalf("cost 3 after the denial of 4: %+v", d)
	}
	if d, _ := c.AllowN(ctx, "k", limit, 3); d.Path != sluice.PathCache {
		t.Fatalf("cost 3 again: %+v", d)
	}
	// Spending forgets the denial: the wait for 3 is longer now.
	if d, _ := c.AllowN(ctx, "k", limit, 1); !d.Allowed || d.Path != sluice.PathStore {
		t.Fatalf("cost 1 with 2 left: %+v", d)
	}
	if d, _ := c.AllowN(ctx, "k", limit, 3); d.Allowed || d.Path != sluice.PathStore || d.RetryAfter != 200*time.Millisecond {
		t.Fatalf("cost 3 after spending 1: %+v, want the store's longer wait", d)
	}
	if got := inner.calls.Load() - calls; got != 4 {
		t.Errorf("%d store calls, want 4", got)
	}
	// n == 0 looks at the store.
	if d, _ := c.AllowN(ctx, "k", limit, 0); d.Path != sluice.PathStore {
		t.Fatalf("a look: %+v", d)
	}
}

func TestReset(t *testing.T) {
	ctx := context.Background()
	limit := sluice.PerMinute(1)
	t.Run("through the cache", func(t *testing.T) {
		c, _, _ := setup(t)
		c.AllowN(ctx, "k", limit, 1)
		c.AllowN(ctx, "k", limit, 1)
		if d, _ := c.AllowN(ctx, "k", limit, 1); d.Path != sluice.PathCache {
			t.Fatalf("not remembered: %+v", d)
		}
		if err := c.Reset(ctx, "k", limit); err != nil {
			t.Fatal(err)
		}
		if d, _ := c.AllowN(ctx, "k", limit, 1); !d.Allowed {
			t.Fatalf("after Reset: %+v", d)
		}
		if c.Len() != 0 {
			t.Errorf("Len %d after Reset, want 0", c.Len())
		}
	})
	t.Run("elsewhere, seen by an allowance", func(t *testing.T) {
		limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Minute}
		c, inner, _ := setup(t)
		c.AllowN(ctx, "k", limit, 2)
		c.AllowN(ctx, "k", limit, 1)
		if d, _ := c.AllowN(ctx, "k", limit, 1); d.Path != sluice.PathCache {
			t.Fatalf("not remembered: %+v", d)
		}
		inner.Limiter.Reset(ctx, "k", limit) // another replica
		if d, _ := c.AllowN(ctx, "k", limit, 1); d.Path != sluice.PathCache {
			t.Fatalf("a reset the cache cannot see: %+v, want the remembered denial", d)
		}
		// A cost of 2 was never denied: the store allows it, which proves the denial of 1
		// wrong.
		if d, _ := c.AllowN(ctx, "k", limit, 2); !d.Allowed {
			t.Fatalf("cost 2 after the reset: %+v", d)
		}
		if c.Len() != 0 {
			t.Fatalf("Len %d: the disproved denial is still held", c.Len())
		}
	})
	t.Run("while the store decides", func(t *testing.T) {
		clk := newClock()
		m := memory.New(memory.WithClock(clk.Now))
		defer m.Close()
		g := &gated{Limiter: m, entered: make(chan struct{}), release: make(chan struct{})}
		c := New(g, WithClock(clk.Now))
		m.AllowN(ctx, "k", limit, 1)
		g.gate.Store(true)
		done := make(chan sluice.Decision)
		go func() {
			d, _ := c.AllowN(ctx, "k", limit, 1)
			done <- d
		}()
		<-g.entered
		// The store has decided (denied); the Reset lands before the answer does.
		if err := c.Reset(ctx, "k", limit); err != nil {
			t.Fatal(err)
		}
		close(g.release)
		if d := <-done; d.Allowed {
			t.Fatalf("the racing request: %+v, want the store's denial", d)
		}
		g.gate.Store(false)
		if c.Len() != 0 {
			t.Fatal("a denial decided before the Reset was remembered")
		}
		if d, _ := c.AllowN(ctx, "k", limit, 1); !d.Allowed {
			t.Fatalf("after the Reset: %+v", d)
		}
	})
}

// gated decides with the store, then, while gate is set, waits for release before
// answering.
type gated struct {
	sluice.Limiter
	gate             atomic.Bool
	entered, release chan struct{}
}

func (g *gated) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	rep, err := g.Limiter.Decide(ctx, reqs, ds)
	if g.gate.Load() {
		g.entered <- struct{}{}
		<-g.release
	}
	return rep, err
}

// fixed answers every request of one limit with one decision or error. It cannot decide
// several limits at once: a request of more is an error wrapping sluice.ErrInvalidKey.
type fixed struct {
	d     sluice.Decision
	err   error
	calls atomic.Int64
}

func (f *fixed) Decide(_ context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	f.calls.Add(1)
	if len(reqs) != 1 {
		return sluice.Report{Kind: store.KindBadInput}, fmt.Errorf("fixed: %d limits: %w", len(reqs), sluice.ErrInvalidKey)
	}
	ds[0] = f.d
	return sluice.Report{StoreCalled: true}, f.err
}
func (f *fixed) Reserve(context.Context, string, sluice.Limit, int64) (sluice.Reservation, error) {
	return sluice.Reservation{}, f.err
}
func (f *fixed) Reset(context.Context, string, sluice.Limit) error { return nil }
func (f *fixed) Settle(context.Context, string, sluice.Limit, sluice.ReservationID, int64) (sluice.Decision, error) {
	return sluice.Decision{}, nil
}

func (f *fixed) Release(context.Context, string, sluice.Limit, sluice.LeaseID) (bool, error) {
	return false, nil
}

// Only the store's own denials are remembered: not a failure mode's, not an error, not
// a denial without a wait.
func TestRemembersOnlyTheStoresDenials(t *testing.T) {
	ctx := context.Background()
	limit := sluice.PerSecond(1)
	for name, f := range map[string]*fixed{
		"fail closed":   {d: sluice.Decision{Limit: limit, RetryAfter: time.Second, Path: sluice.PathClosed}, err: sluice.ErrStoreUnavailable},
		"local":         {d: sluice.Decision{Limit: limit, RetryAfter: time.Second, Path: sluice.PathLocal}},
		"error":         {err: errors.New("connection refused")},
		"no RetryAfter": {d: sluice.Decision{Limit: limit}},
	} {
		t.Run(name, func(t *testing.T) {
			c := New(f)
			for range 3 {
				d, err := c.AllowN(ctx, "k", limit, 1)
				if d != f.d || !errors.Is(err, f.err) {
					t.Fatalf("got %+v, %v; want the inner answer %+v, %v", d, err, f.d, f.err)
				}
			}
			if f.calls.Load() != 3 || c.Len() != 0 {
				t.Errorf("%d calls, %d entries; want 3 and 0", f.calls.Load(), c.Len())
			}
		})
	}
}

// Bad input gets the store's error, whatever the cache holds.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	c, _, _ := setup(t)
	limit := sluice.PerMinute(2)
	c.AllowN(ctx, "k", limit, 2)
	if d, _ := c.AllowN(ctx, "k", limit, 1); d.Allowed {
		t.Fatal("not denied")
	}
	for _, tc := range []struct {
		key   string
		limit sluice.Limit
		n     int64
		want  error
	}{
		{"k", limit, -1, sluice.ErrInvalidCost},
		{"k", limit, 3, sluice.ErrCostExceedsLimit},
		{"k", sluice.Limit{Rate: 0, Period: time.Second}, 1, sluice.ErrInvalidLimit},
		{"", limit, 1, sluice.ErrInvalidKey},
		{strings.Repeat("x", store.MaxKeyLen+1), limit, 1, sluice.ErrInvalidKey},
	} {
		if _, err := c.AllowN(ctx, tc.key, tc.limit, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("AllowN(%.10q, %v, %d): %v, want %v", tc.key, tc.limit, tc.n, err, tc.want)
		}
	}
}

// The entries never take more than MaxBytes, counted as the package doc says; a key too
// large for a shard's share is not remembered.
func TestMemoryBound(t *testing.T) {
	ctx := context.Background()
	const maxBytes = numShards * 4 * (EntryOverhead + 9)
	c, inner, _ := setup(t, WithMaxBytes(maxBytes))
	limit := sluice.PerHour(1)
	for i := range 5000 {
		key := fmt.Sprintf("key-%05d", i)
		c.AllowN(ctx, key, limit, 1)
		if d, _ := c.AllowN(ctx, key, limit, 1); d.Allowed {
			t.Fatalf("%s: second request allowed", key)
		}
		if i%500 == 0 {
			checkBytes(t, c, maxBytes)
		}
	}
	checkBytes(t, c, maxBytes)
	if n := c.Len(); n < numShards || n > maxBytes/(EntryOverhead+9) {
		t.Errorf("Len %d, want between %d and %d", n, numShards, maxBytes/(EntryOverhead+9))
	}
	big := strings.Repeat("x", maxBytes/numShards)
	c.AllowN(ctx, big, limit, 1)
	c.AllowN(ctx, big, limit, 1)
	calls := inner.calls.Load()
	if d, _ := c.AllowN(ctx, big, limit, 1); d.Allowed || d.Path != sluice.PathStore || inner.calls.Load() != calls+1 {
		t.Fatalf("a key larger than a shard's share: %+v, want the store's denial", d)
	}
	checkBytes(t, c, maxBytes)
}

// checkBytes checks every shard's byte count against its entries and its budget, and Len
// against the entries.
func checkBytes(t *testing.T, c *Cache, maxBytes int64) {
	t.Helper()
	total := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		var b int64
		for k := range sh.m {
			b += int64(len(k.key)) + EntryOverhead
		}
		if b != sh.bytes || b > maxBytes/numShards {
			t.Errorf("shard %d: %d bytes counted, %d held, budget %d", i, sh.bytes, b, maxBytes/numShards)
		}
		total += len(sh.m)
		sh.mu.Unlock()
	}
	if total != c.Len() {
		t.Errorf("Len %d, %d entries held", c.Len(), total)
	}
}

func TestAllowMulti(t *testing.T) {
	ctx := context.Background()
	c, inner, _ := setup(t)
	perSec, perMin := sluice.PerSecond(10), sluice.PerMinute(2)
	batch := []sluice.Request{{Key: "k", Limit: perSec, N: 1}, {Key: "k", Limit: perMin, N: 1}}
	for range 2 {
		if ds, err := sluice.AllowMulti(ctx, c, batch); err != nil || !ds[0].Allowed || !ds[1].Allowed {
			t.Fatalf("within both limits: %+v, %v", ds, err)
		}
	}
	calls := inner.calls.Load()
	for range 2 {
		ds, err := sluice.AllowMulti(ctx, c, batch)
		if err != nil || ds[0].Allowed || ds[0].RetryAfter != 0 || ds[1].Allowed || ds[1].RetryAfter == 0 || ds[1].Path != sluice.PathStore {
			t.Fatalf("over the minute's limit: %+v, %v", ds, err)
		}
	}
	if got := inner.calls.Load() - calls; got != 2 {
		t.Errorf("%d store calls for 2 batches, want 2: batches always ask the store", got)
	}
	// The batch's blocking denial is remembered for AllowN; the other request's is not.
	if d, _ := c.AllowN(ctx, "k", perMin, 1); d.Path != sluice.PathCache {
		t.Errorf("the minute's limit alone: %+v, want the remembered denial", d)
	}
	if d, _ := c.AllowN(ctx, "k", perSec, 1); !d.Allowed || d.Path != sluice.PathStore {
		t.Errorf("the second's limit alone: %+v", d)
	}

	// A limiter that cannot decide several limits at once says so; the Cache passes its
	// error on and remembers nothing.
	f := &fixed{d: sluice.Decision{Limit: perMin, RetryAfter: time.Minute}}
	plain := New(f)
	if _, err := sluice.AllowMulti(ctx, plain, batch); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("over a limiter that cannot decide a batch atomically: %v, want the store's error", err)
	}
	if f.calls.Load() != 1 || plain.Len() != 0 {
		t.Errorf("%d calls, %d entries after the store's error; want 1 and 0", f.calls.Load(), plain.Len())
	}
}

// Reserve passes through to the inner limiter: the reservation is the store's (a twin
// store fed the same calls makes the same one), it spends the store's quota and gives it
// back on Cancel, its errors are the store's, and a remembered denial neither answers it
// nor is forgotten by it.
func TestReservePassesThrough(t *testing.T) {
	ctx := context.Background()
	c, inner, clk := setup(t)
	twin := memory.New(memory.WithClock(clk.Now))
	defer twin.Close()
	limit := sluice.PerSecond(2)
	for i := range 4 {
		want, _ := twin.AllowN(ctx, "k", limit, 1)
		if got, err := c.AllowN(ctx, "k", limit, 1); err != nil || got.Allowed != want.Allowed || got.RetryAfter != want.RetryAfter {
			t.Fatalf("request %d: %+v, %v; the store says %+v", i, got, err, want)
		}
	}
	if d, _ := c.AllowN(ctx, "k", limit, 1); d.Path != sluice.PathCache || c.Len() != 1 {
		t.Fatalf("the denial is not remembered: %+v, Len %d", d, c.Len())
	}
	calls := inner.calls.Load()
	want, err := twin.Reserve(ctx, "k", limit, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Reserve(ctx, "k", limit, 1)
	if err != nil || got.OK != want.OK || got.Limit != want.Limit || got.N != want.N || got.Delay != want.Delay {
		t.Fatalf("Reserve through the cache: %+v, %v; the store alone: %+v", got, err, want)
	}
	if !got.OK || got.Delay != 500*time.Millisecond {
		t.Fatalf("Reserve behind a full bucket: %+v, want OK after 500ms", got)
	}
	if n := inner.calls.Load() - calls; n != 0 {
		t.Errorf("Reserve made %d decisions of the inner limiter", n)
	}
	if c.Len() != 1 {
		t.Errorf("Len %d after Reserve, want the denial still held", c.Len())
	}
	// The store holds the reservation: a look at it sees the longer wait.
	look := func() sluice.Decision {
		t.Helper()
		d, err := sluice.AllowN(ctx, inner.Limiter, "k", limit, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d, w := look(), mustAllow(t, twin, "k", limit, 0); d != w || d.Allowed {
		t.Fatalf("the store after the reservation: %+v, the twin %+v", d, w)
	}
	// Cancel goes to the store too, and gives the units back there.
	wok, werr := want.Cancel(ctx)
	if ok, err := got.Cancel(ctx); ok != wok || err != werr || !ok {
		t.Fatalf("Cancel: %v, %v; the store alone: %v, %v", ok, err, wok, werr)
	}
	if d, w := look(), mustAllow(t, twin, "k", limit, 0); d != w {
		t.Fatalf("the store after Cancel: %+v, the twin %+v", d, w)
	}
	// A deadline before the reserved instant: refused by the store, nothing spent.
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if res, err := c.Reserve(dctx, "k", limit, 1); err != nil || res.OK || res.Delay != 500*time.Millisecond {
		t.Fatalf("Reserve past the deadline: %+v, %v; want refused, 500ms", res, err)
	}
	// The store's errors come back as they are.
	for _, tc := range []struct {
		limit sluice.Limit
		n     int64
		want  error
	}{
		{sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Second}, 1, sluice.ErrInvalidLimit},
		{limit, 3, sluice.ErrCostExceedsLimit},
		{limit, -1, sluice.ErrInvalidCost},
	} {
		if _, err := c.Reserve(ctx, "k", tc.limit, tc.n); !errors.Is(err, tc.want) {
			t.Errorf("Reserve(%v, %d): %v, want %v", tc.limit, tc.n, err, tc.want)
		}
	}
	down := errors.New("connection refused")
	if _, err := New(&fixed{err: down}).Reserve(ctx, "k", limit, 1); err != down {
		t.Errorf("Reserve over a failing limiter: %v, want its error %v", err, down)
	}
}

func mustAllow(t *testing.T, l sluice.Limiter, key string, limit sluice.Limit, n int64) sluice.Decision {
	t.Helper()
	d, err := sluice.AllowN(context.Background(), l, key, limit, n)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// 64 goroutines on one key, the clock standing still: exactly the burst is admitted, and
// the denials after it barely reach the store.
func TestConcurrentOneKey(t *testing.T) {
	ctx := context.Background()
	c, inner, _ := setup(t)
	limit := sluice.Limit{Algorithm: sluice.GCRA, Rate: 20, Period: time.Second, Burst: 5}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 100 {
				d, err := c.AllowN(ctx, "hot", limit, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 5 {
		t.Errorf("admitted %d, want exactly the burst of 5", admitted.Load())
	}
	if calls := inner.calls.Load(); calls > 6400/4 {
		t.Errorf("%d of 6400 requests reached the store", calls)
	}
}

// Concurrent decisions, resets and evictions on a small cache over real time, for the race
// detector; and never more admitted than the store admits.
func TestConcurrentChurn(t *testing.T) {
	ctx := context.Background()
	m := memory.New()
	defer m.Close()
	c := New(m, WithMaxBytes(numShards*2*(EntryOverhead+8)), WithMaxAge(time.Millisecond))
	limit := sluice.PerSecond(50)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 3000 {
				key := fmt.Sprintf("key-%03d", rng.IntN(200))
				var err error
				switch rng.IntN(50) {
				case 0:
					err = c.Reset(ctx, key, limit)
				case 1:
					_, err = sluice.AllowMulti(ctx, c, []sluice.Request{{Key: key, Limit: limit, N: 1}, {Key: key + "!", Limit: limit, N: 2}})
				default:
					_, err = c.AllowN(ctx, key, limit, 1+rng.Int64N(3))
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	checkBytes(t, c, numShards*2*(EntryOverhead+8))
}
