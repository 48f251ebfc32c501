package memory_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// Pacing: instead of rejecting what exceeds 2 per second, Reserve says when each call may
// go, and Wait sleeps until then.
func ExampleStore_Reserve() {
	store := memory.New()
	defer store.Close()
	ctx := context.Background()
	limit := sluice.PerSecond(2).WithBurst(1)
	for i := 0; i < 3; i++ {
		r, err := store.Reserve(ctx, "upstream-api", limit, 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(r.OK, r.Delay.Round(100*time.Millisecond))
	}
	// Output:
	// true 0s
	// true 500ms
	// true 1s
}

// sluice.Wait with a deadline refuses at once, spending nothing, when the reserved instant
// would fall after it.
func Example_wait() {
	store := memory.New()
	defer store.Close()
	// Give up rather than wait beyond the deadline: the second call would wait 500ms.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	limit := sluice.PerSecond(2).WithBurst(1)
	fmt.Println(sluice.Wait(ctx, store, "upstream-api", limit, 1))
	err := sluice.Wait(ctx, store, "upstream-api", limit, 1)
	fmt.Println(errors.Is(err, sluice.ErrWaitExceedsDeadline))
	// Output:
	// <nil>
	// true
}
