package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// TestConcurrentOneKey: 8 stores (8 separate connections) × 64 goroutines deciding on one
// key within one window admit exactly the algorithm's bound, never more, for every
// algorithm and for an all-or-nothing pair of limits.
func TestConcurrentOneKey(t *testing.T) {
	t.Parallel()
	const stores, goroutines, attempts = 8, 64, 3
	srv := redistest.Start(t)
	clock := newTestClock() // frozen: the whole run is one instant, inside one window
	var ss []*Store
	for i := 0; i < stores; i++ {
		ss = append(ss, open(t, srv.URL(), WithClock(clock.Now), WithMinTTL(time.Hour)))
	}
	ctx := context.Background()

	run := func(t *testing.T, decide func(s *Store) (bool, error)) int64 {
		var allowed, failed atomic.Int64
		var wg sync.WaitGroup
		for _, s := range ss {
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < attempts; i++ {
						ok, err := decide(s)
						if err != nil {
							failed.Add(1)
							t.Error(err)
							return
						}
						if ok {
							allowed.Add(1)
						}
					}
				}()
			}
		}
		wg.Wait()
		return allowed.Load()
	}

	for _, a := range store.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			l := sluice.Limit{Algorithm: a, Rate: 100, Period: time.Hour}
			key := "hot:" + a.String()
			got := run(t, func(s *Store) (bool, error) {
				d, err := s.AllowN(ctx, key, l, 1)
				return d.Allowed, err
			})
			if got != 100 {
				t.Errorf("%d of %d admitted, want exactly 100", got, stores*goroutines*attempts)
			}
		})
	}
	t.Run("multi", func(t *testing.T) {
		small := sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 10, Period: time.Hour}
		big := sluice.Limit{Algorithm: sluice.GCRA, Rate: 100, Period: time.Hour}
		got := run(t, func(s *Store) (bool, error) {
			ds, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: "hotmulti", Limit: big, N: 1}, {Key: "hotmulti", Limit: small, N: 1}})
			if err != nil {
				return false, err
			}
			return ds[0].Allowed, nil
		})
		if got != 10 {
			t.Errorf("%d multi-limit batches admitted, want exactly 10", got)
		}
		// The big limit was spent only by admitted batches.
		d, err := ss[0].AllowN(ctx, "hotmulti", big, 0)
		if err != nil || d.Remaining != 90 {
			t.Errorf("big limit after the run: %+v, %v; want 90 remaining", d, err)
		}
	})
}
