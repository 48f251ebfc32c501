package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// TestValidationIsCheckRequest: both stores refuse a request with store.CheckRequest's
// error, and take what it takes, whether the limit is new to the store or one it has
// validated already (each keeps those, and checks a request under one of them on a
// shorter path).
func TestValidationIsCheckRequest(t *testing.T) {
	_, mem, red := pairedStores(t)
	ctx := context.Background()
	limits := []sluice.Limit{sluice.PerSecond(10), sluice.PerMinute(5).WithBurst(3),
		{Algorithm: sluice.SlidingWindow, Rate: 4, Period: time.Minute},
		{Algorithm: sluice.Concurrency, Rate: 2, Lease: time.Minute},
		{Rate: 0, Period: time.Second}, {Rate: 1, Period: time.Second, Burst: -1}}
	keys := []string{"k", "", strings.Repeat("x", store.MaxKeyLen), strings.Repeat("x", store.MaxKeyLen+1)}
	type limiter interface {
		sluice.Limiter
		AllowN(context.Context, string, sluice.Limit, int64) (sluice.Decision, error)
	}
	for name, s := range map[string]limiter{"memory": mem, "redis": red} {
		for li, l := range limits {
			for ki, key := range keys {
				for _, n := range []int64{-1, 0, 1, 2, 3, 10, 11} {
					want := store.CheckRequest(key, l, n)
					for pass := range 2 { // the second finds the limit validated
						k := key
						if want == nil && k == "k" {
							k = fmt.Sprintf("k%d-%d-%d-%d", li, ki, n, pass) // fresh state: no denial
						}
						_, err := s.AllowN(ctx, k, l, n)
						_, derr := sluice.AllowN(ctx, s, k, l, n) // by Decide
						if fmt.Sprint(err) != fmt.Sprint(want) || fmt.Sprint(derr) != fmt.Sprint(want) {
							t.Errorf("%s, pass %d: (%.8q…, %v, %d): AllowN %v, Decide %v; want %v", name, pass, key, l, n, err, derr, want)
						}
					}
				}
			}
		}
	}
}
