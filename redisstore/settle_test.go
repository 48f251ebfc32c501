package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// settleLimits are the limits the settlement tests run: every algorithm that settles, at
// 100 per minute (bucket depth 100), and a bucket whose Rate does not divide its Period
// (time in sevenths of a µs).
func settleLimits() []sluice.Limit {
	var ls []sluice.Limit
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket, sluice.FixedWindow, sluice.SlidingWindow} {
		ls = append(ls, sluice.Limit{Algorithm: a, Rate: 100, Period: time.Minute})
	}
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		ls = append(ls, sluice.Limit{Algorithm: a, Rate: 7, Period: time.Second, Burst: 100})
	}
	return ls
}

// TestSettleExact: settlements against an exact model, in the memory store and in Redis,
// on one clock under the test's control. The model is a second key on which the actual
// cost was spent at the reservation's instant, with everything else the same; after the
// settlement both keys must give identical decisions. Over-estimates are refunded and
// under-estimates charged, at the reservation's instant and later while the key is under
// load (its bucket not full, or the same window); a charge beyond what the state can
// hold leaves it empty, as a full spend does, and denies the next request; a reservation
// never settled stands at its estimate and its settlement, after the TTL, is an error.
func TestSettleExact(t *testing.T) {
	t.Parallel()
	clock, mem, red := pairedStores(t)
	ctx := context.Background()
	stores := map[string]sluice.Limiter{"memory": mem, "redis": red}
	type scenario struct {
		name        string
		pre, est, c int64         // spent on both keys, reserved, actual
		elapse      time.Duration // between the reservation and the settlement
		modelCost   int64         // what the model key spends instead of the reservation
		unsettled   bool          // never settled: the TTL passes instead
		deniedAfter bool          // the next request of 1 is denied
	}
	scenarios := []scenario{
		{name: "over-estimate at once", pre: 40, est: 30, c: 10, modelCost: 10},
		{name: "exact estimate", pre: 40, est: 30, c: 30, modelCost: 30},
		{name: "under-estimate at once", pre: 40, est: 30, c: 50, modelCost: 50},
		{name: "over-estimate under load", pre: 80, est: 15, c: 5, elapse: 3 * time.Second, modelCost: 5},
		{name: "under-estimate under load", pre: 60, est: 10, c: 30, elapse: 3 * time.Second, modelCost: 30},
		{name: "zero actual cost", pre: 50, est: 20, c: 0, elapse: time.Second, modelCost: 0},
		{name: "overrun past empty", pre: 80, est: 10, c: 5000, modelCost: 100 - 80, deniedAfter: true},
		{name: "never settled", pre: 40, est: 30, modelCost: 30, unsettled: true, elapse: 2 * time.Second},
	}
	for si, sc := range scenarios {
		for li, l := range settleLimits() {
			for name, st := range stores {
				clock.SetMicros(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(si*100+li) * time.Hour).UnixMicro())
				key := fmt.Sprintf("settle:%d:%d:%s", si, li, name)
				model := key + ":model"
				desc := fmt.Sprintf("%s, %s, %v", sc.name, name, l)
				pre := min(sc.pre, l.MaxCost())
				for _, k := range []string{key, model} {
					if d, err := sluice.AllowN(ctx, st, k, l, pre); err != nil || !d.Allowed {
						t.Fatalf("%s: pre-spend %d: %+v, %v", desc, pre, d, err)
					}
				}
				var d [1]sluice.Decision
				ttl := time.Minute
				if sc.unsettled {
					ttl = time.Second
				}
				if _, err := st.Decide(ctx, []sluice.Request{{Key: key, Limit: l, N: sc.est, SettleTTL: ttl}}, d[:]); err != nil || !d[0].Allowed || d[0].Reservation == 0 {
					t.Fatalf("%s: reservation: %+v, %v", desc, d[0], err)
				}
				if sc.modelCost > 0 {
					if md, err := sluice.AllowN(ctx, st, model, l, sc.modelCost); err != nil || !md.Allowed {
						t.Fatalf("%s: model spend %d: %+v, %v", desc, sc.modelCost, md, err)
					}
				}
				clock.Advance(sc.elapse)
				var got sluice.Decision
				var err error
				if sc.unsettled {
					got, err = st.Settle(ctx, key, l, d[0].Reservation, 1)
					if !errors.Is(err, sluice.ErrUnknownReservation) {
						t.Fatalf("%s: settlement after the TTL: %v, want ErrUnknownReservation", desc, err)
					}
					got, _ = sluice.AllowN(ctx, st, key, l, 0)
				} else if got, err = st.Settle(ctx, key, l, d[0].Reservation, sc.c); err != nil {
					t.Fatalf("%s: settle: %v", desc, err)
				}
				want, _ := sluice.AllowN(ctx, st, model, l, 0)
				if got != want {
					t.Errorf("%s: after settling\n got %+v\nwant %+v (the model)", desc, got, want)
				}
				if nd, _ := sluice.AllowN(ctx, st, key, l, 1); nd.Allowed == sc.deniedAfter {
					t.Errorf("%s: next request allowed %v, want %v", desc, nd.Allowed, !sc.deniedAfter)
				}
			}
		}
	}
}

// TestSettleBadInput: a negative cost, an unknown reservation, a second settlement, a
// malformed id, and settlements or SettleTTLs on algorithms that cannot settle are each a
// clear error that changes nothing, in both stores.
func TestSettleBadInput(t *testing.T) {
	t.Parallel()
	clock, mem, red := pairedStores(t)
	_ = clock
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	for name, st := range map[string]sluice.Limiter{"memory": mem, "redis": red} {
		var d [1]sluice.Decision
		if _, err := st.Decide(ctx, []sluice.Request{{Key: "bad", Limit: l, N: 4, SettleTTL: time.Minute}}, d[:]); err != nil || d[0].Reservation == 0 {
			t.Fatalf("%s: reservation %+v, %v", name, d[0], err)
		}
		look := func() sluice.Decision {
			x, err := sluice.AllowN(ctx, st, "bad", l, 0)
			if err != nil {
				t.Fatal(err)
			}
			return x
		}
		before := look()
		for _, c := range []struct {
			what  string
			limit sluice.Limit
			id    sluice.ReservationID
			cost  int64
			want  error
		}{
			{"negative cost", l, d[0].Reservation, -1, sluice.ErrInvalidCost},
			{"unknown reservation", l, 424242, 1, sluice.ErrUnknownReservation},
			{"no reservation", l, 0, 1, sluice.ErrUnknownReservation},
			{"an id no store gives", l, store.MaxLeaseID + 1, 1, sluice.ErrUnknownReservation},
			{"another limit", sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 11, Period: time.Hour}, d[0].Reservation, 1, sluice.ErrUnknownReservation},
			{"sliding log", sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Hour}, d[0].Reservation, 1, sluice.ErrInvalidLimit},
			{"concurrency", sluice.InFlight(3, time.Second), d[0].Reservation, 1, sluice.ErrInvalidLimit},
		} {
			if _, err := st.Settle(ctx, "bad", c.limit, c.id, c.cost); !errors.Is(err, c.want) {
				t.Errorf("%s: %s: %v, want %v", name, c.what, err, c.want)
			}
			if after := look(); after != before {
				t.Errorf("%s: %s changed the state: %+v, was %+v", name, c.what, after, before)
			}
		}
		settled, err := st.Settle(ctx, "bad", l, d[0].Reservation, 1)
		if err != nil || settled.Remaining != 9 {
			t.Fatalf("%s: settlement: %+v, %v; want 9 remaining", name, settled, err)
		}
		if _, err := st.Settle(ctx, "bad", l, d[0].Reservation, 0); !errors.Is(err, sluice.ErrSettled) {
			t.Errorf("%s: second settlement: %v, want ErrSettled", name, err)
		}
		if after := look(); after != settled {
			t.Errorf("%s: second settlement changed the state: %+v, was %+v", name, after, settled)
		}
		for _, bad := range []sluice.Request{
			{Key: "log", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 10, Period: time.Hour}, N: 1, SettleTTL: time.Minute},
			{Key: "ttl", Limit: l, N: 1, SettleTTL: -time.Second},
		} {
			if _, err := st.Decide(ctx, []sluice.Request{bad}, d[:]); !errors.Is(err, sluice.ErrInvalidLimit) {
				t.Errorf("%s: request %+v: %v, want ErrInvalidLimit", name, bad, err)
			}
			if x, _ := sluice.AllowN(ctx, st, bad.Key, bad.Limit, 0); x.Remaining != 10 {
				t.Errorf("%s: a refused request spent: %+v", name, x)
			}
		}
	}
}

var _ = clocktest.New

// TestDifferentialSettle feeds the Go settlement (algo.Settle on the state the memory store
// would keep under the limit's own algorithm) and the settlement script the same
// decisions, reservations and settlements with the same clock, and demands identical
// results and states: per algorithm that settles 2,000 operations over three keys and the
// limits of TestDifferentialMemory, and 600 at the edges of TestDifferentialExtremes,
// with actual costs from 0 to twice the largest, settlements soon or long after, past the
// reservation's TTL too, and the clock's steps from TestDifferentialMemory, backwards ones
// included.
func TestDifferentialSettle(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clock := newTestClock()
	red := open(t, srv.URL(), WithClock(clock.Now), WithMinTTL(24*time.Hour))
	ctx := context.Background()
	const ttl = 6 * time.Hour
	type pending struct {
		req sluice.Request
		id  sluice.ReservationID
		rec algo.Reserved
	}
	lane := func(t *testing.T, a sluice.Algorithm, limits []sluice.Limit, ops int, move func(*rand.Rand)) {
		rng := rand.New(rand.NewPCG(uint64(a), uint64(len(limits))))
		models := map[string]*refundModel{}
		model := func(r sluice.Request) *refundModel {
			k := r.Key + "|" + r.Limit.String()
			if models[k] == nil {
				models[k] = &refundModel{p: algo.ParamsOf(r.Limit)}
			}
			return models[k]
		}
		var open []pending
		settled := 0
		for i := 0; i < ops; i++ {
			move(rng)
			now := clock.Micros()
			if len(open) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(open))
				pd := open[k]
				open = append(open[:k], open[k+1:]...)
				m := model(pd.req)
				c := rng.Int64N(2*pd.req.Limit.MaxCost() + 1)
				got, err := red.Settle(ctx, pd.req.Key, pd.req.Limit, pd.id, c)
				if now >= pd.rec.At+ttl.Microseconds() {
					if !errors.Is(err, sluice.ErrUnknownReservation) {
						t.Fatalf("op %d: settlement past the TTL: %v", i, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("op %d: settle: %v", i, err)
				}
				before := m.s
				m.s = algo.Settle(m.s, now, m.p, pd.rec, c)
				if before == (algo.State{}) && c <= pd.rec.N {
					m.s = before // a refund creates no key
				}
				look := *m
				if want := look.decide(now, 0).Decision(pd.req.Limit); got != want {
					t.Fatalf("op %d: settle %v est %d (at %d, full %d) actual %d at %d: redis %+v, Go %+v",
						i, pd.req.Limit, pd.rec.N, pd.rec.At, pd.rec.FullAt, c, now, got, want)
				}
				v, _ := srv.Do("GET", red.Key(pd.req.Key, pd.req.Limit))
				if st := decodeState(v); st != m.s {
					t.Fatalf("op %d: state %+v in Redis, %+v in Go", i, st, m.s)
				}
				settled++
				continue
			}
			lim := limits[rng.IntN(len(limits))]
			r := sluice.Request{Key: fmt.Sprintf("settle:%v:%d:%d", a, len(limits), rng.IntN(3)), Limit: lim,
				N: min([]int64{0, 1, 2, lim.MaxCost() / 3, lim.MaxCost()}[rng.IntN(5)], lim.MaxCost())}
			if rng.IntN(2) == 0 {
				r.SettleTTL = ttl
			}
			want := model(r).decide(now, r.N)
			var d [1]sluice.Decision
			if _, err := red.Decide(ctx, []sluice.Request{r}, d[:]); err != nil {
				t.Fatal(err)
			}
			got := d[0]
			if (got.Reservation != 0) != (r.SettleTTL > 0 && r.N > 0 && got.Allowed) {
				t.Fatalf("op %d: reservation %v for %+v", i, got.Reservation, r)
			}
			id := got.Reservation
			got.Reservation = 0
			if got != want.Decision(r.Limit) {
				t.Fatalf("op %d: %v n=%d at %d: redis %+v, Go %+v", i, r.Limit, r.N, now, got, want)
			}
			if id != 0 {
				open = append(open, pending{r, id, algo.ReservedOf(algo.ParamsOf(r.Limit), r.N, now, want)})
			}
		}
		if settled < ops/20 {
			t.Fatalf("only %d settlements", settled)
		}
	}
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket, sluice.FixedWindow, sluice.SlidingWindow} {
		t.Run(a.String(), func(t *testing.T) {
			limits := limitsFor(a)
			lane(t, a, limits, 2000, func(rng *rand.Rand) { step(rng, clock, limits) })
		})
		t.Run(a.String()+"/extremes", func(t *testing.T) {
			limits := extremeLimits(a)
			start := clock.Micros()
			lane(t, a, limits, 600, func(rng *rand.Rand) {
				now := clock.Micros()
				switch p := rng.IntN(10); {
				case p < 4:
				case p < 7:
					clock.SetMicros(now + rng.Int64N(2048))
				case p < 8:
					clock.SetMicros(now - rng.Int64N(1<<20))
				default:
					clock.SetMicros(now + rng.Int64N(int64(time.Hour/time.Microsecond)))
				}
				if clock.Micros() > start+int64(store.MaxPeriod/time.Microsecond) {
					clock.SetMicros(start)
				}
			})
		})
	}
}

// TestSettleAcrossSlots: on a Redis Cluster, a request whose estimated limits live in two
// slots reserves in both (all or nothing), and each reservation settles in its own slot.
func TestSettleAcrossSlots(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	clock := newTestClock()
	s := open(t, clusterURL(cl), WithClock(clock.Now))
	a, b := "org:a", "org:b"
	for i := 0; idSlot(a) == idSlot(b); i++ {
		b = fmt.Sprintf("org:b%d", i)
	}
	ctx := context.Background()
	l := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 100, Period: time.Hour}
	reqs := []sluice.Request{{Key: a, Limit: l, N: 40, SettleTTL: time.Minute}, {Key: b, Limit: l, N: 40, SettleTTL: time.Minute}}
	ds, err := sluice.AllowMulti(ctx, s, reqs)
	if err != nil || !ds[0].Allowed || !ds[1].Allowed || ds[0].Reservation == 0 || ds[1].Reservation == 0 {
		t.Fatalf("reservations across slots: %+v, %v", ds, err)
	}
	for i, c := range []int64{10, 70} {
		d, err := s.Settle(ctx, reqs[i].Key, l, ds[i].Reservation, c)
		if err != nil || d.Remaining != 100-c {
			t.Fatalf("settle %s at %d: %+v, %v; want %d remaining", reqs[i].Key, c, d, err, 100-c)
		}
	}
	// b has 30 left: a request of 40 on both is denied, reserves nothing and spends nothing.
	ds, err = sluice.AllowMulti(ctx, s, reqs)
	if err != nil || ds[0].Allowed || ds[0].Reservation != 0 || ds[1].Reservation != 0 {
		t.Fatalf("denied across slots: %+v, %v", ds, err)
	}
	if d, _ := sluice.AllowN(ctx, s, a, l, 0); d.Remaining != 90 {
		t.Fatalf("a after the denial: %+v, want 90 remaining", d)
	}
}
