package httplimit

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/keys"
)

func userHeader(r *http.Request) string { return r.Header.Get("X-User") }

// layered is per-IP 10/h, per-user 5/h and per-route 2/h on POST /orders, in that order.
func layered() []Policy {
	hour := func(n int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.FixedWindow, Rate: n, Period: time.Hour}
	}
	return []Policy{
		{Name: "per-ip", Limit: hour(10)},
		{Name: "per-user", Limit: hour(5), Key: ByUser(userHeader)},
		{Name: "orders", Route: "POST /orders", Limit: hour(2), Key: ByUser(userHeader)},
	}
}

// remaining looks at a policy's state in the store without spending.
func remaining(t *testing.T, store sluice.Limiter, p Policy, id keys.Identity) int64 {
	t.Helper()
	d, err := store.AllowN(context.Background(), keys.Of(p.Name, id, p.Route, "").String(), p.Limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

func TestLayeredLimits(t *testing.T) {
	ip := keys.Identity{Kind: keys.IP, ID: "192.0.2.1"} // httptest's RemoteAddr
	user := keys.Identity{Kind: keys.User, ID: "alice"}
	type test struct {
		name string
		wrap func(sluice.Limiter) sluice.Limiter
		// After 2 allowed and 3 denied POST /orders, the per-IP and per-user state.
		wantIP, wantUser int64
	}
	tests := []test{
		// Atomic: the 3 denied requests spent nothing anywhere.
		{"atomic store", func(l sluice.Limiter) sluice.Limiter { return l }, 8, 3},
		// In order (documented): each denied request spent per-ip and per-user before
		// the route policy refused it.
		{"store without AllowMulti", func(l sluice.Limiter) sluice.Limiter { return sequential{l} }, 5, 0},
		{"store answering ErrNotAtomic", func(l sluice.Limiter) sluice.Limiter { return &notAtomic{Limiter: l} }, 5, 0},
	}
	for _, b := range backends(t) {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				store, _ := b.new(t)
				lim := tt.wrap(store)
				h := mustNew(t, Config{Limiter: lim, Policies: layered()}).Handler(okHandler)
				var codes []int
				var last *Problem
				for range 5 {
					w := do(h, "POST", "/orders", "", "X-User", "alice")
					codes = append(codes, w.Code)
					if w.Code == http.StatusTooManyRequests {
						last = decodeProblem(t, w)
					}
				}
				if want := []int{200, 200, 429, 429, 429}; !slices.Equal(codes, want) {
					t.Fatalf("statuses %v, want %v", codes, want)
				}
				// The most restrictive policy decided, and only it is named.
				if !slices.Equal(last.ViolatedPolicies, []string{"orders"}) {
					t.Errorf("violated-policies %v, want [orders]", last.ViolatedPolicies)
				}
				p := layered()
				if got := remaining(t, store, p[0], ip); got != tt.wantIP {
					t.Errorf("per-ip remaining %d, want %d", got, tt.wantIP)
				}
				if got := remaining(t, store, p[1], user); got != tt.wantUser {
					t.Errorf("per-user remaining %d, want %d", got, tt.wantUser)
				}
				if na, ok := lim.(*notAtomic); ok && na.calls.Load() == 0 {
					t.Error("AllowMulti was never tried")
				}
				// Other routes are still limited by the per-IP and per-user policies only.
				w := do(h, "GET", "/orders", "", "X-User", "alice")
				lims := parseList(t, w.Header(), "RateLimit")
				if len(lims) != 2 || lims[0].name != "per-ip" || lims[1].name != "per-user" {
					t.Errorf("GET /orders decided by %v, want per-ip and per-user", lims)
				}
			})
		}
	}
}

func TestMostRestrictiveRetryAfter(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testMostRestrictiveRetryAfter(t, b) })
	}
}

func testMostRestrictiveRetryAfter(t *testing.T, b backend) {
	store, _ := b.new(t)
	h := mustNew(t, Config{Limiter: store, Policies: []Policy{
		{Name: "roomy", Limit: sluice.PerHour(100)},
		{Name: "ten", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: 10 * time.Second}},
		{Name: "thirty", Limit: sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: 30 * time.Second}},
	}}).Handler(okHandler)
	if w := do(h, "GET", "/", ""); w.Code != 200 {
		t.Fatalf("first request: %d", w.Code)
	}
	w := do(h, "GET", "/", "")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request: %d, want 429", w.Code)
	}
	if got := retryAfter(t, w); got != 30*time.Second {
		t.Errorf("Retry-After %v, want the longest wait, 30s", got)
	}
	if p := decodeProblem(t, w); !slices.Equal(p.ViolatedPolicies, []string{"ten", "thirty"}) {
		t.Errorf("violated-policies %v, want [ten thirty]", p.ViolatedPolicies)
	}
	lims := parseList(t, w.Header(), "RateLimit")
	// The denied request spent nothing from the policy that would have let it pass.
	if lims[0].name != "roomy" || lims[0].params["r"] != int64(99) {
		t.Errorf("RateLimit %v, want roomy first with r=99", lims)
	}
}
