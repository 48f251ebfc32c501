package region_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/region"
)

// Per-region mode: this region enforces half of a 10/s limit against its own store (here
// in memory; in production the region's Redis).
func ExampleNewShare() {
	local := memory.New()
	defer local.Close()
	limiter, err := region.NewShare(local, 0.5)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	allowed := 0
	for i := 0; i < 10; i++ {
		if d, _ := limiter.AllowN(ctx, "tenant:42", sluice.PerSecond(10), 1); d.Allowed {
			allowed++
		}
	}
	fmt.Println(allowed, limiter.Limit(sluice.PerSecond(10)))
	// Output: 5 5/1s gcra
}

// Global mode: every node decides in process and syncs with the shared Redis every 50ms.
func ExampleNewGlobal() {
	shared, err := redisstore.Open("redis://global-redis.internal:6379")
	if err != nil {
		panic(err)
	}
	defer shared.Close()
	limiter, err := region.NewGlobal(shared, region.WithSyncInterval(50*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer limiter.Close()
	d, err := limiter.AllowN(context.Background(), "tenant:42", sluice.PerSecond(200), 1)
	fmt.Println(d.Allowed, d.Path, err)
}
