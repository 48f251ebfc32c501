package sim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/sim"
)

// A pattern of your own: ten requests in the last ten milliseconds of a window and ten in
// the first ten of the next, against 10 per second.
func ExampleRun() {
	p := sim.Pattern{
		Name:     "edge",
		Limit:    sluice.Limit{Rate: 10, Period: time.Second},
		Duration: 2 * time.Second,
		Keys:     1,
		Arrivals: func(*rand.Rand) []sim.Arrival {
			var a []sim.Arrival
			for _, from := range []time.Duration{990 * time.Millisecond, time.Second} {
				for i := range 10 {
					a = append(a, sim.Arrival{At: (from + time.Duration(i)*time.Millisecond).Microseconds()})
				}
			}
			return a
		},
	}
	report, err := sim.Run(context.Background(), sim.Config{
		Patterns:   []sim.Pattern{p},
		Algorithms: []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog},
	})
	if err != nil {
		panic(err)
	}
	for _, r := range report.Results {
		fmt.Printf("%-14v admitted %2d, at most %.1f× the limit in one second\n", r.Algorithm, r.Admitted, r.MaxWindowRatio)
	}
	// Output:
	// fixed_window   admitted 20, at most 2.0× the limit in one second
	// sliding_window admitted 11, at most 1.1× the limit in one second
	// sliding_log    admitted 10, at most 1.0× the limit in one second
}
