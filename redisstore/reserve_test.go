package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// TestReserveMirrorsAlgo drives the reservation script and internal/algo with the same
// clock and operations, and demands identical results: reservations with and without a
// bound on the wait, decisions (AllowN shares the state), cancellations of recent and old
// reservations, time steps forward, backward and across long idle spells. Lanes (one per
// limit) run in parallel, each with its own store and clock on one server.
func TestReserveMirrorsAlgo(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var limits []sluice.Limit
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		limits = append(limits, limitsFor(a)...)
	}
	for i, l := range limits {
		t.Run(l.String(), func(t *testing.T) {
			t.Parallel()
			clock := newTestClock()
			s := open(t, srv.URL(), WithClock(clock.Now), WithMinTTL(24*time.Hour))
			p := algo.ParamsOf(l)
			rng := rand.New(rand.NewPCG(uint64(i), 77))
			keys := []string{fmt.Sprintf("mirror%d:a", i), fmt.Sprintf("mirror%d:{b}", i)}
			state := map[string]algo.State{}
			type pending struct {
				key string
				r   algo.Reservation
				res sluice.Reservation
			}
			var open []pending
			ctx := context.Background()
			var given int
			for op := 0; op < 2500; op++ {
				switch x := rng.IntN(20); {
				case x == 0:
					clock.Advance(-time.Duration(rng.Int64N(2*p.Period)) * time.Microsecond)
				case x == 1:
					clock.Advance(time.Duration(rng.Int64N(50*p.Period)) * time.Microsecond)
				default:
					clock.Advance(time.Duration(rng.Int64N(p.T+1)) * time.Microsecond)
				}
				now := clock.Micros()
				key := keys[rng.IntN(len(keys))]
				n := rng.Int64N(min(p.MaxCost(), 3) + 1)
				switch y := rng.IntN(10); {
				case y < 5:
					maxWait := []int64{-1, 0, p.T, rng.Int64N(p.Burst*p.T + 1)}[rng.IntN(4)]
					res, got, err := s.reserve(ctx, key, l, n, maxWait)
					if err != nil {
						t.Fatal(err)
					}
					var want algo.Reservation
					state[key], want = algo.ReserveGCRA(state[key], now, p, n, maxWait)
					if n == 0 {
						want = algo.Reservation{OK: true}
					}
					if got != want {
						t.Fatalf("op %d: reserve(%d, maxWait %d) = %+v, algo %+v", op, n, maxWait, got, want)
					}
					if res.OK != got.OK || res.Delay != time.Duration(got.Delay)*time.Microsecond {
						t.Fatalf("op %d: reservation %+v from %+v", op, res, got)
					}
					if got.OK && n > 0 {
						open = append(open, pending{key, got, res})
					}
				case y < 8:
					d, err := s.AllowN(ctx, key, l, n)
					if err != nil {
						t.Fatal(err)
					}
					var r algo.Result
					state[key], r = algo.Decide(state[key], now, p, n)
					if want := r.Decision(l); d != want {
						t.Fatalf("op %d: AllowN = %+v, algo %+v", op, d, want)
					}
				default:
					if len(open) == 0 {
						continue
					}
					j := max(0, len(open)-1-rng.IntN(2))
					c := open[j]
					open = slices.Delete(open, j, j+1)
					ok, err := c.res.Cancel(ctx)
					if err != nil {
						t.Fatal(err)
					}
					var want bool
					state[c.key], want = algo.CancelReservation(state[c.key], now, c.r)
					if want && algo.ExpiresAt(state[c.key], p) <= now {
						state[c.key] = algo.State{} // the script deletes state equivalent to empty
					}
					if ok != want {
						t.Fatalf("op %d: cancel = %v, algo %v", op, ok, want)
					}
					if ok {
						given++
					}
				}
			}
			if given == 0 {
				t.Fatal("no cancellation gave anything back; the lane covers too little")
			}
		})
	}
}

func TestReserveBadInputAndTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL())
	ctx := context.Background()
	for _, a := range []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog} {
		if _, err := s.Reserve(ctx, "k", sluice.PerSecond(5).With(a), 1); !errors.Is(err, sluice.ErrInvalidLimit) {
			t.Errorf("%v: %v, want ErrInvalidLimit", a, err)
		}
	}
	if _, err := s.Reserve(ctx, "k", sluice.PerSecond(5), 6); !errors.Is(err, sluice.ErrCostExceedsLimit) {
		t.Errorf("cost above burst: %v", err)
	}
	if n := srv.MustDo("DBSIZE"); n != "0" {
		t.Fatalf("bad input wrote %s keys", n)
	}
	// A reservation's key lives until its state is empty again, and cancelling the latest
	// reservation gives its time back.
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		l := sluice.Limit{Algorithm: a, Rate: 1, Period: time.Minute, Burst: 1}
		if _, err := s.Reserve(ctx, "ttl", l, 1); err != nil {
			t.Fatal(err)
		}
		r, err := s.Reserve(ctx, "ttl", l, 1) // queued a minute ahead
		if err != nil || !r.OK || r.Delay < 59*time.Second {
			t.Fatalf("%v: second reservation %+v %v", a, r, err)
		}
		ttl, _ := strconv.Atoi(srv.MustDo("PTTL", s.Key("ttl", l)))
		if ttl < 119_000 || ttl > 120_001 {
			t.Fatalf("%v: PTTL %d ms, want about 2 minutes (two queued units)", a, ttl)
		}
		if ok, err := r.Cancel(ctx); !ok || err != nil {
			t.Fatalf("%v: cancel %v %v", a, ok, err)
		}
		ttl, _ = strconv.Atoi(srv.MustDo("PTTL", s.Key("ttl", l)))
		if ttl < 59_000 || ttl > 60_001 {
			t.Fatalf("%v: after cancel PTTL %d ms, want about 1 minute (one unit)", a, ttl)
		}
		fresh := sluice.PerSecond(1).With(a)
		r2, _ := s.Reserve(ctx, "fresh", fresh, 1)
		r3, _ := s.Reserve(ctx, "fresh", fresh, 1)
		if ok, _ := r3.Cancel(ctx); !ok {
			t.Fatalf("%v: latest reservation not given back", a)
		}
		if ok, _ := r2.Cancel(ctx); ok {
			t.Fatalf("%v: a reservation used at once was given back", a)
		}
		ttl, _ = strconv.Atoi(srv.MustDo("PTTL", s.Key("fresh", fresh)))
		if ttl <= 0 || ttl > 1000 {
			t.Fatalf("%v: after cancel PTTL %d, want the first unit's second", a, ttl)
		}
	}
}

// TestWaitCancelledAcrossLatency: through a proxy adding 20ms each way, a Wait whose
// context is cancelled returns promptly with the context's error, and its slot is back.
func TestWaitCancelledAcrossLatency(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	proxy.SetLatency(20 * time.Millisecond)
	s := open(t, "redis://"+proxy.Addr())
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 5 * time.Second, Burst: 1}
	if err := sluice.Wait(ctx, s, "w", l, 1); err != nil { // the free unit
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	rs := reserveSignal{Limiter: s, reserved: make(chan struct{}, 1)}
	go func() { done <- sluice.Wait(wctx, rs, "w", l, 1) }()
	<-rs.reserved // Wait has its reservation, 5s ahead: it sleeps, or is about to
	cancelled := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait returned %v, want context.Canceled", err)
		}
		// A real latency fault: one cancel round trip (40ms) and scheduling on busy cores,
		// within a slack of 1s; the sleep it cut short was 5s.
		if el := time.Since(cancelled); el > time.Second {
			t.Fatalf("cancelled Wait returned after %v", el)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("cancelled Wait did not return")
	}
	r, err := s.Reserve(ctx, "w", l, 1)
	if err != nil || r.Delay > 5*time.Second {
		t.Fatalf("the cancelled slot did not come back: next waits %v (%v)", r.Delay, err)
	}
}

// TestPacingSharedQuota: 16 workers in 4 store clients (4 connections) share one 50/s
// quota on Redis's clock for 20 seconds, each calling sluice.Wait in a loop. Each
// reservation's instant and the moment its call reached Redis (both on Redis's clock) are
// recorded, and the moments the workers proceed (local clock). What is asserted holds
// however late the workers run on a busy machine:
//
//   - Never over the rate. With Burst 1, no open interval of 1/rate (20ms) holds two
//     reserved instants, from the first on. With Burst 10, every interval of length d
//     holds at most Burst + ⌊(d-1)/T⌋ reserved instants (the bucket bound: a burst after
//     any quiet moment, then one unit every 20ms).
//   - The rate is reached whenever demand was continuous: a reservation that had to wait
//     comes at most T after the instant before it, so the quota is never idle while a
//     call waits. A gap longer than T ends only at a call that reached Redis after the
//     gap began and was served at once.
//   - Every unit proceeds at most once: no more workers proceed than units were reserved.
//
// The rate achieved over the run, and how late the workers proceeded, are logged: they
// measure the machine as much as the limiter (bench/ is where a rate is a target). The
// two subtests run in parallel.
func TestPacingSharedQuota(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const (
		clients    = 4
		perClient  = 4
		rate       = 50
		runFor     = 20 * time.Second
		intervalUS = int64(time.Second/time.Microsecond) / rate
	)
	for _, burst := range []int64{1, 10} {
		t.Run(fmt.Sprintf("burst%d", burst), func(t *testing.T) {
			t.Parallel()
			l := sluice.Limit{Algorithm: sluice.GCRA, Rate: rate, Period: time.Second, Burst: burst}
			key := fmt.Sprintf("outbound-api-%d", burst)
			var (
				mu       sync.Mutex
				reserved []reservedUnit  // Redis µs
				proceed  []time.Time     // local
				late     []time.Duration // proceed - At
			)
			ctx, cancel := context.WithTimeout(context.Background(), runFor)
			defer cancel()
			var wg sync.WaitGroup
			for c := 0; c < clients; c++ {
				store := open(t, srv.URL())
				for w := 0; w < perClient; w++ {
					rec := &recorder{Store: store, s: store, mu: &mu, reserved: &reserved}
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							err := sluice.Wait(ctx, rec, key, l, 1)
							now := time.Now()
							if err != nil {
								if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, sluice.ErrWaitExceedsDeadline) {
									t.Error(err)
								}
								return
							}
							mu.Lock()
							proceed = append(proceed, now)
							late = append(late, now.Sub(rec.last.At))
							mu.Unlock()
						}
					}()
				}
			}
			wg.Wait()
			slices.SortFunc(reserved, func(a, b reservedUnit) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delay, b.delay)) })
			slices.SortFunc(proceed, func(a, b time.Time) int { return a.Compare(b) })
			if len(proceed) == 0 {
				t.Fatalf("no unit in %v", runFor)
			}
			if len(proceed) > len(reserved) {
				t.Errorf("%d workers proceeded on %d reserved units", len(proceed), len(reserved))
			}
			p := algo.ParamsOf(l)
			ev := make([]algoEvent, 0, len(reserved))
			for _, r := range reserved {
				ev = append(ev, algoEvent{r.at})
			}

			// Never over the rate. With Burst 1 no interval of 1/rate ever holds two units,
			// from the first instant on. With a larger burst that holds only while the
			// workers keep the quota saturated (a quiet moment refills the bucket), so it is
			// reported, and the algorithm's bound is what is asserted.
			d := burst * intervalUS
			if got := maxWindow(ev, d, -1); burst == 1 && got > burst {
				t.Errorf("an interval of %dµs holds %d reserved units, burst %d", d, got, burst)
			}
			for _, dd := range []int64{d, p.Period, intervalUS} {
				if got, bound := maxWindow(ev, dd, -1), burst+(dd-1)/p.T; got > bound {
					t.Errorf("an interval of %dµs holds %d, bound %d", dd, got, bound)
				}
			}

			// The rate is reached whenever demand was continuous: a reservation that waited
			// (Delay > 0: the quota was spoken for when its call reached Redis) comes at most
			// T after the instant before it. The slack is 1µs, a delay's rounding up to a
			// whole µs (T is a whole 20000µs here, so it is never used). Both instants are
			// on Redis's clock, so no lateness of the workers or of this process enters.
			waited, idle, idleWhileWaiting := 0, 0, 0
			for i := 1; i < len(reserved); i++ {
				prev, r := reserved[i-1], reserved[i]
				gap := r.at - prev.at
				if gap > p.T {
					idle++
				}
				if r.delay == 0 {
					continue
				}
				waited++
				if gap > p.T+1 {
					if idleWhileWaiting++; idleWhileWaiting <= 10 {
						t.Errorf("a reservation waited %dµs for instant %d, %dµs after the previous one: the quota was idle %dµs while it waited",
							r.delay, r.at, gap, gap-p.T)
					}
				}
			}
			if idleWhileWaiting > 0 {
				t.Errorf("%d of %d reservations that waited came more than 1/rate after the instant before them", idleWhileWaiting, waited)
			}
			// 16 workers against 50/s keep calls waiting nearly throughout: without waited
			// reservations the claim above judged nothing.
			if waited < 100 {
				t.Fatalf("only %d of %d reservations waited: the demand never held the quota", waited, len(reserved))
			}

			// The measurements, logged: the rate over [first + 1s, first + 19s] on both
			// clocks, and the workers' lateness. They depend on the machine: on a busy one
			// the workers are late, and at moments none is asking.
			first := reserved[0].at
			afterBurst := reserved[burst-1].at // the initial burst is the first Burst instants
			from, to := first+1_000_000, first+19_000_000
			var byRedis int
			for _, r := range reserved {
				if r.at > from && r.at <= to {
					byRedis++
				}
			}
			t0 := proceed[0]
			var byLocal int
			for _, pt := range proceed {
				if d := pt.Sub(t0); d > time.Second && d <= 19*time.Second {
					byLocal++
				}
			}
			rRedis, rLocal := float64(byRedis)/18, float64(byLocal)/18
			slices.Sort(late)
			local := make([]algoEvent, len(proceed))
			for i, pt := range proceed {
				local[i] = algoEvent{pt.Sub(t0).Microseconds()}
			}
			t.Logf("burst %d: %d units, %d of them waited, %d gaps longer than 1/rate (no call waiting); rate by Redis instants %.3f/s, by local proceed %.3f/s; "+
				"proceed lateness p50 %v p99 %v max %v; most in 1s: %d reserved, %d proceeding; most in %dms: %d reserved, %d proceeding",
				burst, len(proceed), waited, idle, rRedis, rLocal, late[len(late)/2], late[len(late)*99/100], late[len(late)-1],
				maxWindow(ev, 1_000_000, afterBurst), maxWindow(local, 1_000_000, local[min(burst, int64(len(local)))-1].t),
				d/1000, maxWindow(ev, d, afterBurst), maxWindow(local, d, local[min(burst, int64(len(local)))-1].t))
		})
	}
}

type algoEvent struct{ t int64 }

// maxWindow returns the most events in an open interval (x-d, x] of the sorted events,
// counting only intervals that start at or after after (-1 for all).
func maxWindow(ev []algoEvent, d, after int64) int64 {
	var best int64
	j := 0
	for i := range ev {
		for ev[j].t <= ev[i].t-d {
			j++
		}
		if after >= 0 && ev[i].t-d < after {
			continue // the interval (ev[i].t-d, ev[i].t] contains instants before after
		}
		best = max(best, int64(i-j+1))
	}
	return best
}

// reservedUnit is one reservation of the pacing test, on Redis's clock: its instant, and
// how long after the call reached Redis that instant is.
type reservedUnit struct{ at, delay int64 }

// recorder is one worker's sluice.Limiter: it records the reservations (forgetting those
// whose cancellation gave them back) and the last reservation, so the worker can see how
// late Wait let it proceed.
type recorder struct {
	*Store   // Decide and Reset; Reserve records
	s        *Store
	mu       *sync.Mutex
	reserved *[]reservedUnit
	last     sluice.Reservation
}

func (r *recorder) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	maxWait := int64(-1)
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = max(time.Until(deadline).Microseconds(), 0)
	}
	res, ar, err := r.s.reserve(ctx, key, limit, n, maxWait)
	if err != nil || !res.OK {
		return res, err
	}
	r.mu.Lock()
	*r.reserved = append(*r.reserved, reservedUnit{ar.At, ar.Delay})
	r.mu.Unlock()
	r.last = res
	inner := res
	return store.WithCancel(res, func(ctx context.Context) (bool, error) {
		ok, err := inner.Cancel(ctx)
		if ok {
			r.mu.Lock()
			if i := slices.Index(*r.reserved, reservedUnit{ar.At, ar.Delay}); i >= 0 {
				*r.reserved = slices.Delete(*r.reserved, i, i+1)
			}
			r.mu.Unlock()
		}
		return ok, err
	}), nil
}

// TestReserveCluster: on a 3-primary cluster, reservations and their cancellation work for
// identities in every slot, and the state is the key AllowN uses, on the node serving it.
func TestReserveCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	addrs := c.Addrs()
	url := "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	s := open(t, url)
	ctx := context.Background()
	for _, l := range []sluice.Limit{
		{Algorithm: sluice.GCRA, Rate: 1, Period: time.Minute, Burst: 1},
		{Algorithm: sluice.TokenBucket, Rate: 1, Period: time.Minute, Burst: 1},
		{Algorithm: sluice.LeakyBucket, Rate: 1, Period: time.Minute, Burst: 1},
	} {
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("tenant:{%d}", i)
			first, err := s.Reserve(ctx, id, l, 1)
			if err != nil || !first.OK || first.Delay != 0 {
				t.Fatalf("%v %s: first reservation %+v %v", l, id, first, err)
			}
			second, err := s.Reserve(ctx, id, l, 1)
			if err != nil || second.Delay < 59*time.Second {
				t.Fatalf("%v %s: second reservation %+v %v", l, id, second, err)
			}
			if d, err := s.AllowN(ctx, id, l, 1); err != nil || d.Allowed || d.RetryAfter < 119*time.Second {
				t.Fatalf("%v %s: AllowN does not see the reservations: %+v %v", l, id, d, err)
			}
			if ok, err := second.Cancel(ctx); !ok || err != nil {
				t.Fatalf("%v %s: cancel %v %v", l, id, ok, err)
			}
			if n := c.NodeForKey(s.Key(id, l)).MustDo("EXISTS", s.Key(id, l)); n != "1" {
				t.Fatalf("%v %s: state not on the node serving its slot", l, id)
			}
		}
	}
}

// reserveSignal is a Limiter that signals on reserved each time a Reserve through it has
// returned, so that a test knows when a Wait holds its reservation.
type reserveSignal struct {
	sluice.Limiter
	reserved chan struct{}
}

func (r reserveSignal) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	res, err := r.Limiter.Reserve(ctx, key, limit, n)
	r.reserved <- struct{}{}
	return res, err
}
