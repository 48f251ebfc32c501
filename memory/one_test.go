package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// TestDecideOneAgainstGeneral: a request of one limit, which Decide hands to AllowN, is
// decided as the general path (decideMulti) decides it: two stores on one clock, fed the
// same random requests (every algorithm, a few keys, costs from 0 to past the limit's
// MaxCost, invalid ones included), one through Decide and one through decideMulti, give
// the same decisions and errors, and their states then answer the same looks.
func TestDecideOneAgainstGeneral(t *testing.T) {
	ctx := context.Background()
	for _, alg := range store.Algorithms() {
		t.Run(alg.String(), func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			clock := func() time.Time { return now }
			one, general := New(WithClock(clock)), New(WithClock(clock))
			defer one.Close()
			defer general.Close()
			limits := []sluice.Limit{
				{Algorithm: alg, Rate: 5, Period: time.Second},
				{Algorithm: alg, Rate: 3, Period: time.Minute, Burst: 4},
			}
			rng := rand.New(rand.NewPCG(uint64(alg), 1))
			keys := []string{"a", "b", "c"}
			look := func(s *Store, key string, l sluice.Limit) sluice.Decision {
				ds := make([]sluice.Decision, 1)
				if err := s.decideMulti(ctx, []sluice.Request{{Key: key, Limit: l}}, ds); err != nil {
					t.Fatal(err)
				}
				return ds[0]
			}
			for step := range 2000 {
				l := limits[rng.IntN(len(limits))]
				r := sluice.Request{Key: keys[rng.IntN(len(keys))], Limit: l, N: int64(rng.IntN(int(l.MaxCost())+2)) - int64(rng.IntN(2))}
				if rng.IntN(50) == 0 {
					r.Key = "" // bad input
				}
				a, b := make([]sluice.Decision, 1), make([]sluice.Decision, 1)
				rep, errA := one.Decide(ctx, []sluice.Request{r}, a)
				errB := general.decideMulti(ctx, []sluice.Request{r}, b)
				a[0].Lease, b[0].Lease = 0, 0 // random ids
				if fmt.Sprint(errA) != fmt.Sprint(errB) || a[0] != b[0] {
					t.Fatalf("step %d, %+v: Decide gave %+v, %v; the general path %+v, %v", step, r, a[0], errA, b[0], errB)
				}
				if errA == nil && !rep.StoreCalled {
					t.Fatalf("step %d: Report %+v does not say the store was called", step, rep)
				}
				now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
			}
			for _, k := range keys {
				for _, l := range limits {
					a, b := look(one, k, l), look(general, k, l)
					if a.Lease, b.Lease = 0, 0; a != b {
						t.Errorf("%s under %v: after the run the stores hold %+v and %+v", k, l, a, b)
					}
				}
			}
		})
	}
}
