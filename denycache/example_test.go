package denycache_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/denycache"
	"github.com/sluicehq/sluice/memory"
)

// A client over its limit is answered from its denial until the denial could change,
// without a store call. In production the store is Redis behind failover.New, and the
// Cache goes in front of that (see the package doc).
func Example() {
	store := memory.New()
	defer store.Close()
	lim := denycache.New(store)

	ctx := context.Background()
	limit := sluice.PerMinute(2)
	for range 4 {
		d, err := lim.AllowN(ctx, "client:42", limit, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed=%v decided by %v, retry within a minute: %v\n",
			d.Allowed, d.Path, d.RetryAfter > 0 && d.RetryAfter <= time.Minute)
	}
	fmt.Println("denials held:", lim.Len())
	// Output:
	// allowed=true decided by store, retry within a minute: false
	// allowed=true decided by store, retry within a minute: false
	// allowed=false decided by store, retry within a minute: true
	// allowed=false decided by cache, retry within a minute: true
	// denials held: 1
}
