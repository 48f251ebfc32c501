package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

// idsInOtherSlots returns n identities "<base><i>" whose slots are none of avoid's.
func idsInOtherSlots(base string, n int, avoid ...string) []string {
	taken := map[uint16]bool{}
	for _, id := range avoid {
		taken[idSlot(id)] = true
	}
	var out []string
	for i := 0; len(out) < n; i++ {
		if id := fmt.Sprint(base, i); !taken[idSlot(id)] {
			out = append(out, id)
		}
	}
	return out
}

// remaining is what a look at key under l reports.
func remaining(t *testing.T, s *Store, key string, l sluice.Limit) int64 {
	t.Helper()
	d, err := s.AllowN(context.Background(), key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// checkDenied fails t unless ds is a denied batch as [sluice.Limiter.Decide] describes it:
// nothing allowed, RetryAfter only on the requests in blocking.
func checkDenied(t *testing.T, ds []sluice.Decision, blocking ...int) {
	t.Helper()
	for i, d := range ds {
		if d.Allowed || (d.RetryAfter > 0) != slices.Contains(blocking, i) {
			t.Errorf("request %d of a denied batch (blocked by %v): %+v", i, blocking, d)
		}
	}
}

// TestAcrossSlots: on the 3-primary cluster, batches whose limits are in different slots
// (a per-IP limit, per-API-key limits, a per-tenant limit) are decided all or nothing: a
// request denied by one of its limits spends nothing of the others, under 64 concurrent
// goroutines, with every algorithm on either side, on the store's clock and on Redis's;
// the decisions are the memory store's; and a slot failing in the first phase leaves the
// other slots as they were.
func TestAcrossSlots(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	url := clusterURL(c)
	ctx := context.Background()
	const day = 24 * time.Hour
	const workers = 64

	// Every request of worker g: its IP's limit, which admits 5 and then blocks, and
	// ample limits (1000) of all six algorithms on one API key and two on one tenant,
	// which never block: after the run each has spent exactly the requests admitted.
	t.Run("blocked by one slot", func(t *testing.T) {
		t.Parallel()
		clock := newTestClock() // frozen: nothing refills, and refunds are exact
		s := open(t, url, WithClock(clock.Now), WithMinTTL(time.Hour), WithPrefix("blocked:"))
		key, tenant := "api:key", "tenant:1"
		if idSlot(key) == idSlot(tenant) {
			t.Fatal("pick another tenant")
		}
		ips := idsInOtherSlots("ip:", workers, key, tenant)
		var ample []sluice.Limit
		for _, a := range store.Algorithms() {
			ample = append(ample, sluice.Limit{Algorithm: a, Rate: 1000, Period: day})
		}
		tenantLimits := []sluice.Limit{ample[sluice.GCRA], ample[sluice.SlidingLog]}
		blocker := func(g int) sluice.Limit {
			return sluice.Limit{Algorithm: store.Algorithms()[g%6], Rate: 5, Period: day}
		}
		admitted := make([]int, workers)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for g := 0; g < workers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reqs := []sluice.Request{{Key: ips[g], Limit: blocker(g), N: 1}}
				for _, l := range ample {
					reqs = append(reqs, sluice.Request{Key: key, Limit: l, N: 1})
				}
				for _, l := range tenantLimits {
					reqs = append(reqs, sluice.Request{Key: tenant, Limit: l, N: 1})
				}
				for i := 0; i < 12; i++ {
					ds, err := sluice.AllowMulti(ctx, s, reqs)
					if err != nil {
						errs <- err
						return
					}
					if ds[0].Allowed {
						admitted[g]++
						continue
					}
					checkDenied(t, ds, 0)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		total := 0
		for g, n := range admitted {
			if n != 5 {
				t.Errorf("worker %d: %d admitted, want 5", g, n)
			}
			total += n
		}
		for _, l := range ample {
			if got := remaining(t, s, key, l); got != 1000-int64(total) {
				t.Errorf("%v on the key: remaining %d after %d admitted, want %d", l, got, total, 1000-total)
			}
		}
		for _, l := range tenantLimits {
			if got := remaining(t, s, tenant, l); got != 1000-int64(total) {
				t.Errorf("%v on the tenant: remaining %d after %d admitted, want %d", l, got, total, 1000-total)
			}
		}
	})

	// The other way round: one scarce limit on the API key (50 for everyone) and ample
	// limits of all six algorithms on each IP, which spend and are refunded whenever the
	// key denies: each IP's limits have spent exactly what that IP was admitted.
	t.Run("blocked by a shared slot", func(t *testing.T) {
		t.Parallel()
		clock := newTestClock()
		s := open(t, url, WithClock(clock.Now), WithMinTTL(time.Hour), WithPrefix("shared:"))
		key := "api:key"
		ips := idsInOtherSlots("ip:", workers, key)
		scarce := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 50, Period: day}
		var ample []sluice.Limit
		for _, a := range store.Algorithms() {
			ample = append(ample, sluice.Limit{Algorithm: a, Rate: 1000, Period: day, Burst: 1000})
		}
		admitted := make([]int64, workers)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for g := 0; g < workers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var reqs []sluice.Request
				for _, l := range ample {
					reqs = append(reqs, sluice.Request{Key: ips[g], Limit: l, N: 2})
				}
				reqs = append(reqs, sluice.Request{Key: key, Limit: scarce, N: 1})
				for i := 0; i < 4; i++ {
					ds, err := sluice.AllowMulti(ctx, s, reqs)
					if err != nil {
						errs <- err
						return
					}
					if ds[0].Allowed {
						admitted[g]++
						continue
					}
					checkDenied(t, ds, len(reqs)-1)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		var total int64
		for g, n := range admitted {
			total += n
			for _, l := range ample {
				if got := remaining(t, s, ips[g], l); got != 1000-2*n {
					t.Errorf("worker %d, %v: remaining %d after %d admitted, want %d", g, l, got, n, 1000-2*n)
				}
			}
		}
		if total != 50 {
			t.Errorf("%d admitted under a limit of 50", total)
		}
	})

	// On Redis's clock (TIME on each primary): the windows and the log refund exactly;
	// GCRA refunds keep the time between the two phases, at most a unit in all here.
	t.Run("redis clock", func(t *testing.T) {
		t.Parallel()
		s := open(t, url, WithPrefix("clock:"))
		key := "api:key"
		ips := idsInOtherSlots("ip:", workers, key)
		long := store.MaxPeriod // no window ends during the test
		exact := []sluice.Limit{
			{Algorithm: sluice.SlidingLog, Rate: 1000, Period: day},
			{Algorithm: sluice.FixedWindow, Rate: 1000, Period: long},
			{Algorithm: sluice.SlidingWindow, Rate: 1000, Period: long},
		}
		gcra := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1000, Period: 1000 * day} // a unit a day
		blocker := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 5, Period: long}
		var total int
		var mu sync.Mutex
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for g := 0; g < workers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reqs := []sluice.Request{{Key: ips[g], Limit: blocker, N: 1}, {Key: key, Limit: gcra, N: 1}}
				for _, l := range exact {
					reqs = append(reqs, sluice.Request{Key: key, Limit: l, N: 1})
				}
				n := 0
				for i := 0; i < 10; i++ {
					ds, err := sluice.AllowMulti(ctx, s, reqs)
					if err != nil {
						errs <- err
						return
					}
					if ds[0].Allowed {
						n++
						continue
					}
					checkDenied(t, ds, 0)
				}
				if n != 5 {
					t.Errorf("worker %d: %d admitted, want 5", g, n)
				}
				mu.Lock()
				total += n
				mu.Unlock()
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, l := range exact {
			if got := remaining(t, s, key, l); got != 1000-int64(total) {
				t.Errorf("%v: remaining %d after %d admitted, want %d", l, got, total, 1000-total)
			}
		}
		if got := remaining(t, s, key, gcra); got > 1000-int64(total) || got < 999-int64(total) {
			t.Errorf("%v: remaining %d after %d admitted, want %d or one less", gcra, got, total, 1000-total)
		}
	})

	// Random batches over identities in several slots, every algorithm, costs 0 to 3 and a
	// clock that moves forward: the decisions are exactly the memory store's. (A refunded
	// window state is left in the spend's window, as a look leaves it, where the memory
	// store's denied batch may leave it in an earlier one; the two differ only for a
	// clock that later steps back before that window.)
	t.Run("matches memory", func(t *testing.T) {
		t.Parallel()
		clock := newTestClock()
		s := open(t, url, WithClock(clock.Now), WithMinTTL(24*time.Hour), WithPrefix("diff:"))
		mem := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
		defer mem.Close()
		rng := rand.New(rand.NewPCG(17, 19))
		var limits []sluice.Limit
		for _, a := range store.Algorithms() {
			limits = append(limits, limitsFor(a)...)
		}
		ids := idsInOtherSlots("id:", 5)
		cross, denied := 0, 0
		for i := 0; i < 1500; i++ {
			before := clock.Micros()
			step(rng, clock, limits)
			if clock.Micros() < before {
				clock.SetMicros(before)
			}
			var reqs []sluice.Request
			seen := map[[2]any]bool{}
			for len(reqs) < 2+rng.IntN(3) {
				l := limits[rng.IntN(len(limits))]
				r := sluice.Request{Key: ids[rng.IntN(len(ids))], Limit: l, N: min(rng.Int64N(4), l.MaxCost())}
				if k := [2]any{r.Key, r.Limit}; !seen[k] {
					seen[k] = true
					reqs = append(reqs, r)
				}
			}
			want, werr := sluice.AllowMulti(ctx, mem, reqs)
			got, gerr := sluice.AllowMulti(ctx, s, reqs)
			if werr != nil || gerr != nil {
				t.Fatalf("batch %d: memory %v, redis %v", i, werr, gerr)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("batch %d %v:\nredis  %+v\nmemory %+v", i, reqs, got, want)
			}
			if slices.ContainsFunc(reqs, func(r sluice.Request) bool { return idSlot(r.Key) != idSlot(reqs[0].Key) }) {
				cross++
				if !got[0].Allowed {
					denied++
				}
			}
		}
		if cross < 500 || denied < 100 {
			t.Errorf("%d batches across slots, %d denied: the run did not exercise the protocol", cross, denied)
		}
	})
}

// TestAcrossSlotsPhaseOneFailure: when one slot's primary fails the first phase (here out
// of memory, maxmemory with noeviction, so its script cannot write), the batch returns
// that error, and the slots that spent are refunded: their limits are exactly as before;
// likewise when the caller's deadline passes while one slot's primary is paused. And the
// protocol's cost in script calls.
func TestAcrossSlotsPhaseOneFailure(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	clock := newTestClock()
	s := open(t, clusterURL(c), WithClock(clock.Now), WithMinTTL(time.Hour))
	ctx := context.Background()
	gcra := sluice.Limit{Algorithm: sluice.GCRA, Rate: 10, Period: time.Hour}
	logl := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Hour}
	fixed := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	bucket := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 10, Period: time.Hour}
	// Three identities served by three different primaries.
	var ids []string
	var nodes []*redistest.Server
	for i := 0; len(ids) < 3; i++ {
		id := fmt.Sprint("fail:", i)
		if n := c.NodeForKey(s.Key(id, gcra)); !slices.Contains(nodes, n) {
			ids, nodes = append(ids, id), append(nodes, n)
		}
	}
	reqs := []sluice.Request{
		{Key: ids[0], Limit: gcra, N: 2}, {Key: ids[0], Limit: logl, N: 1},
		{Key: ids[1], Limit: fixed, N: 3},
		{Key: ids[2], Limit: bucket, N: 1},
	}
	if _, err := sluice.AllowMulti(ctx, s, reqs); err != nil { // state on every key
		t.Fatal(err)
	}
	look := func() []sluice.Decision {
		var out []sluice.Decision
		for _, r := range reqs {
			d, err := s.AllowN(ctx, r.Key, r.Limit, 0)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		return out
	}
	before := look()
	nodes[2].MustDo("CONFIG", "SET", "maxmemory", "1")
	_, err := sluice.AllowMulti(ctx, s, reqs)
	var rerr *rueidis.RedisError
	if !errors.As(err, &rerr) || !strings.Contains(rerr.Error(), "OOM") {
		t.Fatalf("with the third slot's primary out of memory: %v, want its OOM error", err)
	}
	nodes[2].MustDo("CONFIG", "SET", "maxmemory", "0")
	if after := look(); !slices.Equal(after, before) {
		t.Errorf("the slots that spent were not refunded:\nbefore %+v\nafter  %+v", before, after)
	}
	ds, err := sluice.AllowMulti(ctx, s, reqs)
	if err != nil || !ds[0].Allowed {
		t.Fatalf("once the primary has memory again: %+v %v", ds, err)
	}
	for i, d := range look() {
		if d.Remaining != before[i].Remaining-reqs[i].N {
			t.Errorf("request %d: remaining %d after the batch, want %d", i, d.Remaining, before[i].Remaining-reqs[i].N)
		}
	}

	// The caller's deadline passes while the third slot's primary is paused (SIGSTOP):
	// the batch returns the deadline's error, the two slots that answered are refunded all
	// the same, and the third slot's call, whose fate was unknown, may run once its
	// primary resumes: its unit then stays spent (under-admission, as the package doc
	// says).
	before = look()
	nodes[2].Pause()
	dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = sluice.AllowMulti(dctx, s, reqs)
	cancel()
	nodes[2].Resume()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("with the third slot's primary paused past the deadline: %v, want the deadline's error", err)
	}
	after := look()
	for i := range reqs[:3] {
		if after[i] != before[i] {
			t.Errorf("request %d: not refunded after the deadline:\nbefore %+v\nafter  %+v", i, before[i], after[i])
		}
	}
	if r := after[3].Remaining; r != before[3].Remaining-1 && r != before[3].Remaining {
		t.Errorf("the paused slot: remaining %d, want %d (its call ran on resuming) or %d", r, before[3].Remaining-1, before[3].Remaining)
	}

	// The cost: a batch over three slots is three script calls when it is allowed (one
	// round trip), and when the third slot denies, two more to refund the two that spent
	// (a second round trip).
	once := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour}
	denied := []sluice.Request{{Key: ids[0], Limit: gcra, N: 1}, {Key: ids[1], Limit: fixed, N: 1}, {Key: ids[2], Limit: once, N: 1}}
	if _, err := s.AllowN(ctx, ids[2], once, 1); err != nil {
		t.Fatal(err)
	}
	if ds, err := sluice.AllowMulti(ctx, s, denied); err != nil || ds[0].Allowed { // loads the refund script
		t.Fatalf("batch blocked by its third slot: %+v %v", ds, err)
	}
	calls := func(batch []sluice.Request) int64 {
		for _, n := range nodes {
			n.MustDo("CONFIG", "RESETSTAT")
		}
		if _, err := sluice.AllowMulti(ctx, s, batch); err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, n := range nodes {
			c, _ := n.ScriptStats()
			sum += c
		}
		return sum
	}
	if got := calls(reqs); got != 3 {
		t.Errorf("an allowed batch over 3 slots made %d script calls, want 3", got)
	}
	if got := calls(denied); got != 5 {
		t.Errorf("a batch over 3 slots denied by one made %d script calls, want 5", got)
	}
}
