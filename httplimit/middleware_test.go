package httplimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/store"
)

// policyNames returns the policy names in w's RateLimit header, nil when there is none.
func policyNames(t *testing.T, w *httptest.ResponseRecorder) []string {
	t.Helper()
	if w.Header().Get("RateLimit") == "" {
		return nil
	}
	var names []string
	for _, it := range parseList(t, w.Header(), "RateLimit") {
		names = append(names, it.name)
	}
	return names
}

func TestRoutes(t *testing.T) {
	store, _ := newStore(t)
	h := mustNew(t, Config{Limiter: store, Policies: []Policy{
		{Name: "item", Route: "GET /items/{id}", Limit: sluice.PerHour(2)},
		{Name: "items", Route: "/items/", Limit: sluice.PerHour(5)},
		{Name: "host", Route: "api.example.com/", Limit: sluice.PerHour(5)},
	}}).Handler(okHandler)
	tests := []struct {
		method, target string
		status         int
		policies       string
	}{
		{"GET", "/items/1", 200, "item"},
		{"GET", "/items/2", 200, "item"}, // one pattern, one state: the limit is per route
		{"GET", "/items/3", 429, "item"},
		{"GET", "/items//3", 429, "item"}, // a non-canonical spelling is the same route
		{"GET", "/items/../items/3", 429, "item"},
		{"POST", "/items/1", 200, "items"}, // method does not match; the subtree does
		{"GET", "/items/1/comments", 200, "items"},
		{"GET", "/other", 200, ""}, // no policy applies: no headers
		{"GET", "http://api.example.com/x", 200, "host"},
	}
	for _, tt := range tests {
		w := do(h, tt.method, tt.target, "")
		if w.Code != tt.status {
			t.Errorf("%s %s: status %d, want %d", tt.method, tt.target, w.Code, tt.status)
		}
		if got := strings.Join(policyNames(t, w), ","); got != tt.policies {
			t.Errorf("%s %s: policies %q, want %q", tt.method, tt.target, got, tt.policies)
		}
	}
}

func TestTiersAndOverrides(t *testing.T) {
	store, _ := newStore(t)
	h := mustNew(t, Config{
		Limiter: store,
		Tier:    func(r *http.Request) string { return r.Header.Get("X-Tier") },
		Policies: []Policy{{
			Name:      "per-user",
			Key:       ByUser(userHeader),
			Tiers:     map[string]sluice.Limit{"free": sluice.PerHour(2), "pro": sluice.PerHour(5)},
			Overrides: map[keys.Identity]sluice.Limit{{Kind: keys.User, ID: "vip"}: sluice.PerHour(100)},
		}},
	}).Handler(okHandler)
	quota := func(user, tier string) (int, any) {
		w := do(h, "GET", "/", "", "X-User", user, "X-Tier", tier)
		if w.Header().Get("RateLimit-Policy") == "" {
			return w.Code, nil
		}
		return w.Code, parseList(t, w.Header(), "RateLimit-Policy")[0].params["q"]
	}
	tests := []struct {
		user, tier string
		status     int
		q          any
	}{
		{"ann", "free", 200, int64(2)},
		{"ann", "free", 200, int64(2)},
		{"ann", "free", 429, int64(2)},
		{"ann", "pro", 200, int64(5)},   // an upgrade starts afresh under the new limit
		{"bob", "enterprise", 200, nil}, // no limit for the tier: not limited, no headers
		{"bob", "", 200, nil},
		{"vip", "free", 200, int64(100)}, // the override beats the tier
		{"", "free", 200, nil},           // anonymous: the user policy does not apply
	}
	for i, tt := range tests {
		status, q := quota(tt.user, tt.tier)
		if status != tt.status || q != tt.q {
			t.Errorf("%d: user %q tier %q: status %d q %v, want %d q %v", i, tt.user, tt.tier, status, q, tt.status, tt.q)
		}
	}
}

func TestShadowNeverBlocks(t *testing.T) {
	// With ShadowHeaders the shadow policies are in the headers; by default they stay
	// out (a client obeying trial's r=0 would stop although nothing is enforced), and
	// are decided, logged and in Result all the same.
	for _, shadowHeaders := range []bool{true, false} {
		t.Run(fmt.Sprintf("ShadowHeaders=%v", shadowHeaders), func(t *testing.T) {
			testShadowNeverBlocks(t, shadowHeaders)
		})
	}
}

// failingPolicy is a Limiter that fails every call deciding a request of policy, with a
// store error, and passes the others to the Limiter it wraps.
type failingPolicy struct {
	sluice.Limiter
	policy string
}

func (f failingPolicy) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	for _, r := range reqs {
		if r.Policy == f.policy {
			return sluice.Report{}, &sluice.StoreError{Kind: store.KindTimeout, Err: errors.New("timed out")}
		}
	}
	return f.Limiter.Decide(ctx, reqs, ds)
}

func testShadowNeverBlocks(t *testing.T, shadowHeaders bool) {
	store, _ := newStore(t)
	var logs bytes.Buffer
	var results []*Result
	h := mustNew(t, Config{
		Limiter:       failingPolicy{store, "broken"},
		ShadowHeaders: shadowHeaders,
		Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
		Policies: []Policy{
			{Name: "real", Limit: sluice.PerHour(3)},
			{Name: "trial", Limit: sluice.PerHour(1), Shadow: true},
			{Name: "broken", Limit: sluice.PerHour(1), Shadow: true, Key: ByUser(func(*http.Request) string {
				return "xxx" // failingPolicy fails its decisions
			})},
		},
		Limited: func(w http.ResponseWriter, r *http.Request, res *Result) {
			results = append(results, res)
			DefaultLimited(w, r, res)
		},
	}).Handler(okHandler)
	for i, want := range []struct {
		status   int
		policies string
	}{
		{200, "real,trial"},
		{200, "real,trial"}, // trial would deny: reported, not enforced
		{200, "real,trial"},
		// Denied by real: the shadow policies are looked at (cost 0), spending nothing,
		// and reported with their state.
		{429, "real,trial"},
	} {
		w := do(h, "GET", "/", "")
		if w.Code != want.status {
			t.Errorf("request %d: status %d, want %d", i, w.Code, want.status)
		}
		wantPolicies := want.policies
		if !shadowHeaders {
			wantPolicies = "real"
		}
		if got := strings.Join(policyNames(t, w), ","); got != wantPolicies {
			t.Errorf("request %d: policies %q, want %q", i, got, wantPolicies)
		}
		for _, name := range []string{"RateLimit-Policy", "RateLimit"} {
			var got []string
			for _, it := range parseList(t, w.Header(), name) {
				got = append(got, it.name)
			}
			if strings.Join(got, ",") != wantPolicies {
				t.Errorf("request %d: %s names %v, want %s", i, name, got, wantPolicies)
			}
		}
		if i >= 1 && shadowHeaders {
			if r := parseList(t, w.Header(), "RateLimit")[1].params["r"]; r != int64(0) {
				t.Errorf("request %d: trial r=%v, want 0", i, r)
			}
		}
	}
	// The denied request's Result holds trial, over its limit, as it is.
	if len(results) != 1 || len(results[0].Decisions) != 2 {
		t.Fatalf("Results of denied requests %+v, want one with real and trial", results)
	}
	if d := results[0].Decisions[1]; d.Policy != "trial" || !d.Shadow || d.Allowed || d.Remaining != 0 {
		t.Errorf("trial in the denied request's Result: %+v, want over its limit", d)
	}
	if v := results[0].Violated(); len(v) != 1 || v[0] != "real" {
		t.Errorf("violated %v, want [real]: a shadow policy never blocks", v)
	}
	out := logs.String()
	// Requests 1 to 3 are over trial's limit, the denied one included.
	if n := strings.Count(out, "level=WARN msg=\"rate limit would deny (shadow)\" policy=trial"); n != 3 {
		t.Errorf("%d shadow denials logged, want 3:\n%s", n, out)
	}
	// Each request, the denied one too, tried the broken shadow policy; the record names
	// the policy and its store key.
	if n := strings.Count(out, `level=ERROR msg="shadow rate limit not decided" policy=broken key=broken:user:xxx`); n != 4 {
		t.Errorf("the broken shadow policy's error was logged %d times with its policy and key, want 4:\n%.2000s", n, out)
	}
}

func TestLimiterErrors(t *testing.T) {
	unavailable := fmt.Errorf("failover: breaker open: %w", sluice.ErrStoreUnavailable)
	tests := []struct {
		name       string
		err        error
		retryAfter time.Duration
		status     int
		header     string // Retry-After
	}{
		{"store unavailable (fail closed)", unavailable, 0, 503, "1"},
		{"store unavailable, custom Retry-After rounded up", unavailable, 2500 * time.Millisecond, 503, "3"},
		{"other store error: fail closed too", errors.New("dial tcp 127.0.0.1:1: connection refused"), 0, 503, "1"},
		{"closed store", sluice.ErrClosed, 0, 503, "1"},
		{"bad input: never fail open", fmt.Errorf("store: %w", sluice.ErrInvalidLimit), 0, 500, ""},
		{"bad key", fmt.Errorf("store: %w", sluice.ErrInvalidKey), 0, 500, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var called atomic.Bool
			next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called.Store(true) })
			h := mustNew(t, Config{
				Limiter:               brokenStore{tt.err},
				UnavailableRetryAfter: tt.retryAfter,
				Policies:              []Policy{{Name: "p", Limit: sluice.PerSecond(1)}, {Name: "q", Limit: sluice.PerHour(9)}},
			}).Handler(next)
			w := do(h, "GET", "/", "")
			if called.Load() {
				t.Fatal("the request was let through")
			}
			if w.Code != tt.status || w.Header().Get("Retry-After") != tt.header {
				t.Errorf("status %d Retry-After %q, want %d %q", w.Code, w.Header().Get("Retry-After"), tt.status, tt.header)
			}
			if w.Header().Get("RateLimit") != "" {
				t.Error("RateLimit sent without a decision")
			}
			if p := decodeProblem(t, w); strings.Contains(w.Body.String(), tt.err.Error()) || p.Type != ProblemBlank {
				t.Errorf("problem %+v: want about:blank, without the internal error", p)
			}
		})
	}
}

func TestUnidentifiableClient(t *testing.T) {
	store, _ := newStore(t)
	tests := []struct {
		name   string
		key    KeyFunc
		remote string
	}{
		{"Unix socket peer", ByIP(nil), "@"},
		{"API key policy without a hasher", ByAPIKey(nil, Header("X-API-Key")), ""},
		{"user policy without a function", ByUser(nil), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got error
			h := mustNew(t, Config{
				Limiter:  store,
				Policies: []Policy{{Name: "p", Limit: sluice.PerSecond(1), Key: tt.key}},
				Error: func(w http.ResponseWriter, r *http.Request, err error) {
					got = err
					DefaultError(w, r, err)
				},
			}).Handler(okHandler)
			w := do(h, "GET", "/", tt.remote)
			if w.Code != 500 || !errors.Is(got, ErrIdentify) {
				t.Errorf("status %d error %v, want 500 and ErrIdentify", w.Code, got)
			}
		})
	}
}

func TestHooks(t *testing.T) {
	store, _ := newStore(t)
	var limited *Result
	h := mustNew(t, Config{
		Limiter:  store,
		Policies: []Policy{{Name: "p", Limit: sluice.PerHour(1)}},
		Limited: func(w http.ResponseWriter, r *http.Request, res *Result) {
			limited = res
			w.WriteHeader(http.StatusTeapot)
			fmt.Fprint(w, "slow down")
		},
	}).Handler(okHandler)
	do(h, "GET", "/", "")
	w := do(h, "GET", "/", "")
	if w.Code != http.StatusTeapot || w.Body.String() != "slow down" {
		t.Errorf("custom Limited not used: %d %q", w.Code, w.Body)
	}
	if w.Header().Get("Retry-After") == "" || w.Header().Get("RateLimit") == "" {
		t.Error("headers not set before the Limited hook")
	}
	if limited == nil || limited.Allowed || limited.RetryAfter <= 59*time.Minute || len(limited.Decisions) != 1 ||
		limited.Decisions[0].Key != keys.Of("p", keys.Identity{Kind: keys.IP, ID: "192.0.2.1"}, "", "").String() {
		t.Errorf("Result %+v", limited)
	}

	h = mustNew(t, Config{
		Limiter:  brokenStore{sluice.ErrStoreUnavailable},
		Policies: []Policy{{Name: "p", Limit: sluice.PerHour(1)}},
		Unavailable: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set("Retry-After", "30")
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		},
	}).Handler(okHandler)
	w = do(h, "GET", "/", "")
	if w.Code != 503 || w.Header().Get("Retry-After") != "30" || !strings.Contains(w.Body.String(), "maintenance") {
		t.Errorf("custom Unavailable not used: %d %v %q", w.Code, w.Header(), w.Body)
	}
}

func TestDefaultLimitedBody(t *testing.T) {
	store, _ := newStore(t)
	h := mustNew(t, Config{Limiter: store, Policies: []Policy{{Name: "p", Limit: sluice.PerMinute(1)}}}).Handler(okHandler)
	do(h, "GET", "/", "")
	w := do(h, "GET", "/", "")
	p := decodeProblem(t, w)
	if w.Code != 429 || p.Type != ProblemQuotaExceeded || p.Title == "" ||
		p.Detail != "Retry after 60 seconds." || len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "p" {
		t.Errorf("%d %+v", w.Code, p)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	store, _ := newStore(t)
	ok := sluice.PerSecond(1)
	tests := []struct {
		name     string
		limiter  sluice.Limiter
		policies []Policy
		want     string
	}{
		{"no limiter", nil, nil, "Limiter is nil"},
		{"empty name", store, []Policy{{Limit: ok}}, "empty name"},
		{"duplicate name", store, []Policy{{Name: "a", Limit: ok}, {Name: "a", Limit: ok}}, "duplicate"},
		{"non-ASCII name", store, []Policy{{Name: "débit", Limit: ok}}, "printable ASCII"},
		{"no limit", store, []Policy{{Name: "a"}}, "no Limit"},
		{"invalid limit", store, []Policy{{Name: "a", Limit: sluice.Limit{Rate: 1}}}, "period"},
		{"invalid tier", store, []Policy{{Name: "a", Tiers: map[string]sluice.Limit{"free": {Rate: -1, Period: time.Second}}}}, `tier "free"`},
		{"invalid override", store, []Policy{{Name: "a", Limit: ok, Overrides: map[keys.Identity]sluice.Limit{{Kind: keys.User, ID: "x"}: {}}}}, "override"},
		{"bad route", store, []Policy{{Name: "a", Limit: ok, Route: "GET items"}}, "route"},
		{"conflicting routes", store, []Policy{
			{Name: "a", Limit: ok, Route: "GET /a/{x}/c"},
			{Name: "b", Limit: ok, Route: "GET /a/b/{y}"},
		}, "conflict"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{Limiter: tt.limiter, Policies: tt.policies})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	// No policy: a pass-through that sends no headers.
	h := mustNew(t, Config{Limiter: store}).Handler(okHandler)
	if w := do(h, "GET", "/", ""); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Errorf("no policies: %d %v", w.Code, w.Header())
	}
}

// TestConcurrentLayeredIsExact: under concurrent load on an atomic store, exactly the
// tightest limit's worth of requests passes, and the denied ones spend nothing elsewhere.
func TestConcurrentLayeredIsExact(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { testConcurrentLayeredIsExact(t, b) })
	}
}

func testConcurrentLayeredIsExact(t *testing.T, b backend) {
	store, _ := b.new(t)
	policies := []Policy{
		{Name: "per-ip", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 100, Period: time.Hour}},
		{Name: "per-user", Limit: sluice.PerHour(50), Key: ByUser(userHeader)},
		{Name: "tight", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 20, Period: time.Hour}, Key: Global()},
	}
	h := mustNew(t, Config{Limiter: store, Policies: policies}).Handler(okHandler)
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				if do(h, "GET", "/", "", "X-User", "u").Code == 200 {
					passed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if passed.Load() != 20 {
		t.Errorf("%d requests passed, want 20", passed.Load())
	}
	if got := remaining(t, store, policies[0], keys.Identity{Kind: keys.IP, ID: "192.0.2.1"}); got != 80 {
		t.Errorf("per-ip remaining %d, want 80: denied requests spent quota", got)
	}
}
