package overload_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/overload"
)

// A limit of 5 requests in flight, 20% of it reserved for Critical requests: Sheddable
// and Default requests are admitted up to 4 in flight, Critical ones up to 5.
func Example() {
	ctx := context.Background()
	lim, err := overload.New(overload.Config{MinLimit: 5, InitialLimit: 5, MaxWait: -1})
	if err != nil {
		fmt.Println(err)
		return
	}
	var held []*overload.Permit
	for _, c := range []overload.Criticality{overload.Sheddable, overload.Default, overload.Default, overload.Sheddable, overload.Sheddable, overload.Critical, overload.Critical} {
		p, err := lim.Acquire(ctx, c)
		var shed *overload.Shed
		if errors.As(err, &shed) {
			fmt.Printf("%-9s shed: %s, retry after %v\n", c, shed.Reason, shed.RetryAfter)
			continue
		}
		held = append(held, p)
		fmt.Printf("%-9s admitted, %d in flight\n", c, lim.Stats().InFlight)
	}
	for _, p := range held {
		p.Release() // the request's latency is a sample of the service's
	}
	fmt.Printf("%+v\n", lim.Stats())
	// Output:
	// sheddable admitted, 1 in flight
	// default   admitted, 2 in flight
	// default   admitted, 3 in flight
	// sheddable admitted, 4 in flight
	// sheddable shed: limit, retry after 1s
	// critical  admitted, 5 in flight
	// critical  shed: limit, retry after 1s
	// {Limit:5 InFlight:0 Queued:0}
}

// Criticality comes from a trusted header or a policy; a name the limiter does not know
// counts as Default.
func ExampleParseCriticality() {
	for _, s := range []string{"CRITICAL_PLUS", "sheddable_plus", "sheddable", "urgent"} {
		c, ok := overload.ParseCriticality(s)
		fmt.Println(s, c, ok)
	}
	// Output:
	// CRITICAL_PLUS critical true
	// sheddable_plus default true
	// sheddable sheddable true
	// urgent default false
}

// An event loop admits requests with Enqueue, which never blocks: the outcome of a
// request that waits for a permit arrives through its callback when a permit ends. The
// callback runs under the limiter's lock, so it only hands the outcome on.
func ExampleLimiter_Enqueue() {
	lim, err := overload.New(overload.Config{MinLimit: 1, MaxLimit: 1, MaxWait: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	var events []string
	var held []*overload.Permit
	for _, c := range []overload.Criticality{overload.Critical, overload.Sheddable, overload.Critical} {
		lim.Enqueue(c, func(p *overload.Permit, err error) {
			if err != nil {
				events = append(events, fmt.Sprintf("%s: %v", c, err))
				return
			}
			held = append(held, p)
			events = append(events, fmt.Sprintf("%s admitted", c))
		})
	}
	fmt.Printf("%v %+v\n", events, lim.Stats())
	events = nil
	held[0].Release() // the waiting Critical request takes the permit
	fmt.Printf("%v %+v\n", events, lim.Stats())
	held[1].Release()
	// Output:
	// [critical admitted sheddable: overload: sheddable request shed: limit] {Limit:1 InFlight:1 Queued:1}
	// [critical admitted] {Limit:1 InFlight:1 Queued:0}
}
