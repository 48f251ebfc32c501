package memory_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

func Example() {
	// A clock that stands still, so that the output is the same on every run.
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memory.New(memory.WithClock(func() time.Time { return now }))
	defer store.Close()

	limit := sluice.PerSecond(2) // GCRA, burst 2
	for i := 0; i < 3; i++ {
		d, err := store.AllowN(context.Background(), "user:42", limit, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry_after=%v\n", d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// allowed=true remaining=1 retry_after=0s
	// allowed=true remaining=0 retry_after=0s
	// allowed=false remaining=0 retry_after=500ms
}

func ExampleStore_Decide() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memory.New(memory.WithClock(func() time.Time { return now }))
	defer store.Close()

	// 2 per second and 3 per hour on one API key, spent together or not at all.
	reqs := []sluice.Request{
		{Key: "key:abc", Limit: sluice.PerSecond(2), N: 1},
		{Key: "key:abc", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}, N: 1},
	}
	for i := 0; i < 4; i++ {
		ds, _ := sluice.AllowMulti(context.Background(), store, reqs)
		fmt.Println(ds[0].Allowed, ds[0].RetryAfter, ds[1].Remaining)
		now = now.Add(time.Second)
	}
	// Output:
	// true 0s 2
	// true 0s 1
	// true 0s 0
	// false 0s 0
}
