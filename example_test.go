package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

func Example() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := memory.New(memory.WithClock(func() time.Time { return now }))

	// 3 requests per second, sliding window counter.
	limit := sluice.PerSecond(3).With(sluice.SlidingWindow)
	for i := 0; i < 4; i++ {
		d, _ := store.AllowN(context.Background(), "client-7", limit, 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 1s
}

func ExampleLimit_Validate() {
	err := sluice.Limit{Rate: 10, Period: 0}.Validate()
	fmt.Println(errors.Is(err, sluice.ErrInvalidLimit), err)
	// Output:
	// true sluice: invalid limit: period must be at least 1µs, got 0s
}

func ExampleCheckRequest() {
	// A cost no amount of waiting could satisfy is an error, not a denial.
	err := sluice.CheckRequest("k", sluice.PerMinute(5), 6)
	fmt.Println(errors.Is(err, sluice.ErrCostExceedsLimit))
	// Output:
	// true
}
