package httplimit

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/stack"
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

// remaining looks at a policy's state through lim without spending.
func remaining(t *testing.T, lim sluice.Limiter, p Policy, id keys.Identity) int64 {
	t.Helper()
	return look(t, lim, keys.Of(p.Name, id, p.Route, "").String(), p.Limit).Remaining
}

// TestLayeredLimits: the applying policies of a request are one request to the Limiter,
// decided all or nothing by any Limiter: the bare store, and the production stack of
// decorators over it (with and without its deny cache), under a decorator of the
// caller's. A request the route policy denies spends nothing from the others.
func TestLayeredLimits(t *testing.T) {
	ip := keys.Identity{Kind: keys.IP, ID: "192.0.2.1"} // httptest's RemoteAddr
	user := keys.Identity{Kind: keys.User, ID: "alice"}
	tests := []struct {
		name  string
		o     stack.Options
		limit func(*stack.Stack) sluice.Limiter
	}{
		{"bare store", stack.Options{}, func(st *stack.Stack) sluice.Limiter { return st.Store }},
		{"stack", stack.Options{}, (*stack.Stack).Limiter},
		{"stack without deny cache", stack.Options{DenyCache: stack.DenyCache{Off: true}}, (*stack.Stack).Limiter},
	}
	for _, b := range backends(t) {
		for _, tt := range tests {
			t.Run(b.name+"/"+tt.name, func(t *testing.T) {
				clk := clocktest.New(start)
				o := tt.o
				o.Clock = clk.Now
				lim := tt.limit(b.open(t, o))
				rec := &recorder{Limiter: lim}
				h := mustNew(t, Config{Limiter: rec, Policies: layered()}).Handler(okHandler)
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
				// Each request was one Decide call of its three policies.
				if len(rec.calls) != 5 {
					t.Errorf("%d Decide calls for 5 requests, want 5", len(rec.calls))
				}
				for i, c := range rec.calls {
					var names []string
					for _, r := range c {
						names = append(names, r.Policy)
					}
					if !slices.Equal(names, []string{"per-ip", "per-user", "orders"}) {
						t.Errorf("call %d decided policies %v, want [per-ip per-user orders] at once", i, names)
					}
				}
				// The 3 denied requests spent nothing anywhere.
				p := layered()
				if got := remaining(t, lim, p[0], ip); got != 8 {
					t.Errorf("per-ip remaining %d, want 8", got)
				}
				if got := remaining(t, lim, p[1], user); got != 3 {
					t.Errorf("per-user remaining %d, want 3", got)
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

// TestDeniedRequestReportsOtherPoliciesExactly is the regression: a request that
// one policy denies spends nothing from the others, and the RateLimit field reports their
// state exactly, through the production stack on memory and on Redis. wide (GCRA 100/min)
// then narrow (fixed window 2/h), both per IP: after 2 allowed and 5 denied requests,
// wide has 98 left, not fewer, and narrow none.
func TestDeniedRequestReportsOtherPoliciesExactly(t *testing.T) {
	wide := Policy{Name: "wide", Limit: sluice.PerMinute(100), Key: ByIP(nil)}
	narrow := Policy{Name: "narrow", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 2, Period: time.Hour}, Key: ByIP(nil)}
	ip := keys.Identity{Kind: keys.IP, ID: "192.0.2.1"}
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			lim, _ := b.new(t)
			h := mustNew(t, Config{Limiter: lim, Policies: []Policy{wide, narrow}}).Handler(okHandler)
			for i := range 7 {
				w := do(h, "GET", "/", "")
				if want := map[bool]int{true: 200, false: 429}[i < 2]; w.Code != want {
					t.Fatalf("request %d: status %d, want %d", i, w.Code, want)
				}
				if i < 2 {
					continue
				}
				// The clock stands still: wide has spent 2 of 100 (full again in 1.2s,
				// t=2); narrow's hour window ends 59.88s after start (t=60).
				if got, want := w.Header().Get("RateLimit"), `"wide";r=98;t=2, "narrow";r=0;t=60`; got != want {
					t.Errorf("request %d: RateLimit %q, want %q", i, got, want)
				}
				if got, want := w.Header().Get("RateLimit-Policy"), `"wide";q=100;w=60, "narrow";q=2;w=3600`; got != want {
					t.Errorf("request %d: RateLimit-Policy %q, want %q", i, got, want)
				}
				if got := w.Header().Get("Retry-After"); got != "60" {
					t.Errorf("request %d: Retry-After %q, want 60", i, got)
				}
				if p := decodeProblem(t, w); !slices.Equal(p.ViolatedPolicies, []string{"narrow"}) {
					t.Errorf("request %d: violated-policies %v, want [narrow]", i, p.ViolatedPolicies)
				}
			}
			if got := remaining(t, lim, wide, ip); got != 98 {
				t.Errorf("wide has %d left in the store, want 98: denied requests spent it", got)
			}
			if got := remaining(t, lim, narrow, ip); got != 0 {
				t.Errorf("narrow has %d left in the store, want 0", got)
			}
		})
	}
}

// TestShadowOnDeniedRequestSpendsNothing: a shadow policy is decided after the enforced
// ones, spending only when the request passed; on a denied request it is looked at (cost
// 0), and appears in Result.Decisions (and, with ShadowHeaders, the headers) with its
// state as it is.
func TestShadowOnDeniedRequestSpendsNothing(t *testing.T) {
	hour := func(n int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.FixedWindow, Rate: n, Period: time.Hour}
	}
	gate := Policy{Name: "gate", Limit: hour(1)}
	measure := Policy{Name: "measure", Limit: hour(10), Shadow: true}
	ip := keys.Identity{Kind: keys.IP, ID: "192.0.2.1"}
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			lim, _ := b.new(t)
			rec := &recorder{Limiter: lim}
			var res *Result
			h := mustNew(t, Config{Limiter: rec, Policies: []Policy{gate, measure}, ShadowHeaders: true,
				Limited: func(w http.ResponseWriter, r *http.Request, r2 *Result) {
					res = r2
					DefaultLimited(w, r, r2)
				},
			}).Handler(okHandler)
			if w := do(h, "GET", "/", ""); w.Code != 200 {
				t.Fatalf("first request: %d", w.Code)
			}
			for i := range 3 {
				res = nil
				w := do(h, "GET", "/", "")
				if w.Code != http.StatusTooManyRequests {
					t.Fatalf("request %d: status %d, want 429", i+1, w.Code)
				}
				if got, want := w.Header().Get("RateLimit"), `"gate";r=0;t=60, "measure";r=9;t=60`; got != want {
					t.Errorf("request %d: RateLimit %q, want %q", i+1, got, want)
				}
				if res == nil || len(res.Decisions) != 2 {
					t.Fatalf("request %d: Result %+v, want gate and measure", i+1, res)
				}
				if d := res.Decisions[1]; d.Policy != "measure" || !d.Shadow || d.Remaining != 9 || !d.Allowed || d.Path != sluice.PathStore {
					t.Errorf("request %d: shadow decision %+v, want measure with 9 left (it would pass)", i+1, d)
				}
				if !slices.Equal(res.Violated(), []string{"gate"}) {
					t.Errorf("request %d: violated %v, want [gate]", i+1, res.Violated())
				}
			}
			// Each request: the enforced policy in one call, then the shadow one on its
			// own, at cost 1 when the request passed and 0 when it was denied.
			var costs []int64
			for _, c := range rec.calls {
				if len(c) != 1 {
					t.Fatalf("call of %d requests, want one policy per call: %+v", len(c), c)
				}
				if c[0].Policy == "measure" {
					if !c[0].Shadow {
						t.Error("the shadow policy was decided as enforced")
					}
					costs = append(costs, c[0].N)
				}
			}
			if !slices.Equal(costs, []int64{1, 0, 0, 0}) {
				t.Errorf("shadow costs %v, want [1 0 0 0]", costs)
			}
			if got := remaining(t, lim, measure, ip); got != 9 {
				t.Errorf("measure has %d left in the store, want 9: a denied request spent it", got)
			}
		})
	}
}
