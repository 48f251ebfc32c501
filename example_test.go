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

// At most 2 requests of a client in flight: each admitted request holds a lease until it
// releases it (or until the lease's 30s have passed).
func ExampleInFlight() {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	limit := sluice.InFlight(2, 30*time.Second)
	a, _ := sluice.Allow(ctx, store, "client-7", limit)
	b, _ := sluice.Allow(ctx, store, "client-7", limit)
	c, _ := sluice.Allow(ctx, store, "client-7", limit)
	fmt.Println(a.Allowed, b.Allowed, c.Allowed, c.RetryAfter <= 30*time.Second)
	held, _ := store.Release(ctx, "client-7", limit, a.Lease)
	again, _ := store.Release(ctx, "client-7", limit, a.Lease)
	d, _ := sluice.Allow(ctx, store, "client-7", limit)
	fmt.Println(held, again, d.Allowed)
	// Output:
	// true true false true
	// true false true
}

// A cost known only when the work is done: spend an estimate now, settle the actual cost
// later. The over-estimate comes back; an under-estimate is charged.
func ExampleLimiter_settle() {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := memory.New(memory.WithClock(func() time.Time { return now }))
	defer store.Close()
	tokens := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Minute}
	d := make([]sluice.Decision, 1)
	store.Decide(ctx, []sluice.Request{{Key: "user:42", Limit: tokens, N: 300, SettleTTL: time.Minute}}, d)
	fmt.Println(d[0].Allowed, d[0].Remaining)
	after, _ := store.Settle(ctx, "user:42", tokens, d[0].Reservation, 120)
	fmt.Println(after.Remaining)
	_, err := store.Settle(ctx, "user:42", tokens, d[0].Reservation, 120)
	fmt.Println(errors.Is(err, sluice.ErrSettled))
	// Output:
	// true 700
	// 880
	// true
}

// A monthly quota billed from the 15th, counted in Berlin's calendar: the zone is parsed
// once, and the Limit it goes into is a plain comparable value.
func ExamplePerCalendar() {
	ctx := context.Background()
	now := time.Date(2026, 3, 14, 23, 30, 0, 0, time.UTC) // 00:30 on the 15th in Berlin
	store := memory.New(memory.WithClock(func() time.Time { return now }))
	defer store.Close()
	berlin, err := sluice.ParseZone("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	quota := sluice.PerCalendar(1000, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: berlin, Anchor: 15})
	d, _ := sluice.AllowN(ctx, store, "tenant:7", quota, 10)
	fmt.Println(quota, d.Remaining, d.Window.Hours()) // 15 March to 15 April: the clocks go forward on the 29th
	// Output:
	// 1000/calendar_month Europe/Berlin anchor 15 990 743
}
