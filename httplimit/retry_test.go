package httplimit

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// TestWaitingRetryAfterIsEnough: a client that gets a 429 and waits exactly Retry-After
// seconds is allowed on its next try, for every algorithm; one second less is not enough
// (Retry-After is the real wait rounded up, not a window length).
func TestWaitingRetryAfterIsEnough(t *testing.T) {
	shapes := []sluice.Limit{
		{Rate: 3, Period: time.Second},               // emission interval 333334µs
		{Rate: 5, Period: time.Minute, Burst: 2},     // burst below rate
		{Rate: 2, Period: 7 * time.Second, Burst: 4}, // burst above rate
		{Rate: 10, Period: 2500 * time.Millisecond},  // sub-second remainder
		{Rate: 1, Period: 24 * time.Hour},            // one a day
	}
	for _, b := range backends(t) {
		for _, a := range store.Algorithms() {
			for _, shape := range shapes {
				limit := shape.With(a)
				t.Run(fmt.Sprintf("%s/%v/%d per %v burst %d", b.name, a, limit.Rate, limit.Period, limit.Burst), func(t *testing.T) {
					store, clk := b.new(t)
					h := mustNew(t, Config{Limiter: store, Policies: []Policy{{Name: "p", Limit: limit}}}).Handler(okHandler)
					for cycle := range 4 {
						// Spend until refused.
						n := 0
						for ; n <= int(limit.MaxCost())+1; n++ {
							if w := do(h, "GET", "/", ""); w.Code == http.StatusTooManyRequests {
								break
							} else if w.Code != http.StatusOK {
								t.Fatalf("status %d", w.Code)
							}
						}
						if n > int(limit.MaxCost()) {
							t.Fatalf("cycle %d: %d requests passed a limit of %d", cycle, n, limit.MaxCost())
						}
						w := do(h, "GET", "/", "")
						if w.Code != http.StatusTooManyRequests {
							t.Fatalf("cycle %d: a retry at once got %d, want 429", cycle, w.Code)
						}
						wait := retryAfter(t, w)
						clk.Advance(wait - time.Second)
						if w := do(h, "GET", "/", ""); w.Code != http.StatusTooManyRequests {
							t.Errorf("cycle %d: allowed after %v, before Retry-After %v: the header is later than needed",
								cycle, wait-time.Second, wait)
						}
						clk.Advance(time.Second)
						if w := do(h, "GET", "/", ""); w.Code != http.StatusOK {
							t.Fatalf("cycle %d: waited Retry-After %v and got %d, want 200", cycle, wait, w.Code)
						}
						// Move the phase so the next cycle starts somewhere else in a window.
						clk.Advance(time.Duration(cycle*137+11) * time.Millisecond)
					}
				})
			}
		}
	}
}
