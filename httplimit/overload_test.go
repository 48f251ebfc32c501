package httplimit

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/overload"
)

// gate is a handler that holds every request it gets until release is closed, so a test
// knows exactly how many requests are in flight.
type gate struct {
	entered chan struct{}
	release chan struct{}
	wg      sync.WaitGroup
}

func newGate(t *testing.T) *gate {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.entered <- struct{}{}
	<-g.release
	w.Write([]byte("ok"))
}

// open lets every held request finish and waits for them.
func (g *gate) open() {
	select {
	case <-g.release:
	default:
		close(g.release)
	}
	g.wg.Wait()
}

// send serves one request through h: "held" when it reached the gate (it stays in
// flight until open), else the status it was answered with.
func (g *gate) send(h http.Handler, target, remote string, header ...string) string {
	done := make(chan *httptest.ResponseRecorder, 1)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		done <- do(h, "GET", target, remote, header...)
	}()
	select {
	case <-g.entered:
		return "held"
	case w := <-done:
		return http.StatusText(w.Code)
	}
}

// pinned is an overload limit fixed at limit requests in flight that never queues.
func pinned(t *testing.T, limit, criticalReserve, defaultReserve int) *overload.Limiter {
	t.Helper()
	l, err := overload.New(overload.Config{MinLimit: limit, MaxLimit: limit, MaxWait: -1,
		CriticalReserve: criticalReserve, DefaultReserve: defaultReserve})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestOverloadShedsByCriticality(t *testing.T) {
	st, _ := newStore(t)
	// A limit of 5: Sheddable requests are admitted up to 3 in flight, Default ones up
	// to 4, Critical ones up to 5.
	lim := pinned(t, 5, 20, 20)
	g := newGate(t)
	h := mustNew(t, Config{Limiter: st, Overload: lim, Policies: []Policy{
		{Name: "ip", Limit: sluice.PerHour(1000)},
		{Name: "batch", Route: "/batch/", Limit: sluice.PerHour(1000), Criticality: new(overload.Sheddable)},
		{Name: "pay", Route: "/pay", Limit: sluice.PerHour(1000), Criticality: new(overload.Critical)},
		{Name: "api", RouteSet: "other", Route: "/", Limit: sluice.PerHour(1000)},
	}}).Handler(g)
	steps := []struct {
		target string
		want   string
	}{
		{"/batch/1", "held"},
		{"/batch/2", "held"},
		{"/batch/3", "held"},
		{"/batch/4", "Service Unavailable"}, // sheddable share full
		{"/x", "held"},                      // no criticality: Default
		{"/batch/5", "Service Unavailable"},
		{"/y", "Service Unavailable"}, // default share full
		{"/pay", "held"},              // critical keeps its reserve
		{"/pay", "Service Unavailable"},
	}
	for i, s := range steps {
		if got := g.send(h, s.target, "192.0.2.1:1"); got != s.want {
			t.Fatalf("step %d: GET %s: %s, want %s (%+v)", i, s.target, got, s.want, lim.Stats())
		}
	}
	if st := lim.Stats(); st.InFlight != 5 {
		t.Errorf("in flight %d, want 5", st.InFlight)
	}
	g.open()
	if st := lim.Stats(); st.InFlight != 0 {
		t.Errorf("after the handlers returned: in flight %d, want 0", st.InFlight)
	}
}

func TestCriticalityRule(t *testing.T) {
	ip := &keys.ClientIP{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")}
	m := mustNew(t, Config{Limiter: brokenStore{}, Overload: pinned(t, 5, 20, 0),
		Criticality: TrustedCriticality(ip, "X-Criticality"), DefaultCriticality: overload.Sheddable,
		Policies: []Policy{
			{Name: "all", Limit: sluice.PerHour(1), Criticality: new(overload.Default)},
			{Name: "batch", Route: "/batch/", Limit: sluice.PerHour(1), Criticality: new(overload.Sheddable)},
			{Name: "pay", RouteSet: "b", Route: "/batch/pay", Limit: sluice.PerHour(1), Criticality: new(overload.Critical)},
		}})
	bare := mustNew(t, Config{Limiter: brokenStore{}, Overload: pinned(t, 5, 20, 0), DefaultCriticality: overload.Sheddable,
		Policies: []Policy{{Name: "batch", Route: "/batch/", Limit: sluice.PerHour(1), Criticality: new(overload.Sheddable)}}})
	tests := []struct {
		m                    *Middleware
		target, remote, crit string
		want                 overload.Criticality
	}{
		{m, "/x", "192.0.2.1:1", "", overload.Default},           // the highest of the matched: all
		{m, "/batch/1", "192.0.2.1:1", "", overload.Default},     // all (default) beats batch (sheddable)
		{m, "/batch/pay", "192.0.2.1:1", "", overload.Critical},  // pay, in its own route set
		{m, "/x", "192.0.2.1:1", "critical", overload.Default},   // an untrusted claim is ignored
		{m, "/x", "10.1.1.1:1", "sheddable", overload.Sheddable}, // a trusted claim wins
		{m, "/batch/pay", "10.1.1.1:1", "sheddable", overload.Sheddable},
		{m, "/x", "10.1.1.1:1", "urgent", overload.Default}, // a garbage claim is ignored
		{bare, "/batch/1", "192.0.2.1:1", "", overload.Sheddable},
		{bare, "/x", "192.0.2.1:1", "", overload.Sheddable}, // no policy sets one: the default
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", tt.target, nil)
		r.RemoteAddr = tt.remote
		if tt.crit != "" {
			r.Header.Set("X-Criticality", tt.crit)
		}
		var routes []string
		for i := range tt.m.sets {
			routes = append(routes, tt.m.sets[i].match(r))
		}
		if got := tt.m.criticality(r, routes); got != tt.want {
			t.Errorf("%s from %s claiming %q: %v, want %v", tt.target, tt.remote, tt.crit, got, tt.want)
		}
	}
}

func mustPrefixes(t *testing.T, s ...string) []netip.Prefix {
	t.Helper()
	p, err := keys.ParsePrefixes(s...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestShedAnswer(t *testing.T) {
	st, _ := newStore(t)
	lim := pinned(t, 1, -1, 0)
	g := newGate(t)
	var logs bytes.Buffer
	var seen []string
	h := mustNew(t, Config{Limiter: st, Overload: lim, Policies: []Policy{{Name: "ip", Limit: sluice.PerHour(100)}},
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		OnOverload: func(c overload.Criticality, shed *overload.Shed) {
			if shed == nil {
				seen = append(seen, c.String()+" admitted")
			} else {
				seen = append(seen, c.String()+" shed "+shed.Reason)
			}
		}}).Handler(g)
	if got := g.send(h, "/", "192.0.2.1:1"); got != "held" {
		t.Fatalf("first request: %s, want held", got)
	}
	w := do(h, "GET", "/", "192.0.2.1:1", "Authorization", "Bearer sk_live_secret")
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", w.Code)
	}
	p := decodeProblem(t, w)
	if p.Type != ProblemTemporaryReducedCapacity {
		t.Errorf("problem type %q, want %q", p.Type, ProblemTemporaryReducedCapacity)
	}
	if ra := retryAfter(t, w); ra < time.Second {
		t.Errorf("Retry-After %v", ra)
	}
	if w.Header().Get("RateLimit") != "" {
		t.Errorf("a shed request was decided by the rate limits: RateLimit %q", w.Header().Get("RateLimit"))
	}
	rec := logs.String()
	for _, want := range []string{`"level":"WARN"`, `"msg":"request shed (overload)"`, `"criticality":"default"`, `"reason":"limit"`, `"limit":1`, `"in_flight":1`} {
		if !strings.Contains(rec, want) {
			t.Errorf("log %s lacks %s", rec, want)
		}
	}
	if strings.Contains(rec, "sk_live_secret") {
		t.Errorf("log carries the raw API key: %s", rec)
	}
	g.open()
	if want := []string{"default admitted", "default shed limit"}; strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Errorf("OnOverload saw %q, want %q", seen, want)
	}

	// A custom Shed hook writes its own answer, with Retry-After already set.
	h2 := mustNew(t, Config{Limiter: st, Overload: pinned(t, 1, -1, 0), Policies: []Policy{{Name: "ip", Limit: sluice.PerHour(100)}},
		Shed: func(w http.ResponseWriter, r *http.Request, shed *overload.Shed) {
			http.Error(w, "busy: "+shed.Reason, http.StatusTooManyRequests)
		}})
	g2 := newGate(t)
	hh := h2.Handler(g2)
	g2.send(hh, "/", "192.0.2.1:1")
	w = do(hh, "GET", "/", "192.0.2.1:1")
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "busy: limit") || w.Header().Get("Retry-After") == "" {
		t.Errorf("custom Shed: %d %q Retry-After %q", w.Code, w.Body, w.Header().Get("Retry-After"))
	}
}

func TestDeniedRequestDropsItsPermit(t *testing.T) {
	st, _ := newStore(t)
	lim := pinned(t, 1, -1, 0) // one request in flight at most
	h := mustNew(t, Config{Limiter: st, Overload: lim, Policies: []Policy{{Name: "ip", Limit: sluice.PerHour(1)}}}).Handler(okHandler)
	if w := do(h, "GET", "/", "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	for range 3 {
		if w := do(h, "GET", "/", "192.0.2.1:1"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("over the rate limit: %d, want 429", w.Code)
		}
	}
	if st := lim.Stats(); st.InFlight != 0 {
		t.Fatalf("denied requests hold %d permits", st.InFlight)
	}
	if w := do(h, "GET", "/", "192.0.2.2:1"); w.Code != 200 {
		t.Fatalf("another client after the denials: %d, want 200 (a denied request gave its permit back)", w.Code)
	}

	// A request the limiter cannot decide gives its permit back too.
	broken := mustNew(t, Config{Limiter: brokenStore{err: sluice.ErrStoreUnavailable}, Overload: lim,
		Policies: []Policy{{Name: "ip", Limit: sluice.PerHour(1)}}}).Handler(okHandler)
	for range 2 {
		if w := do(broken, "GET", "/", "192.0.2.3:1"); w.Code != http.StatusServiceUnavailable || decodeProblem(t, w).Type == ProblemTemporaryReducedCapacity {
			t.Fatalf("store down: %d %q, want the limiter's 503", w.Code, w.Body)
		}
	}
	if st := lim.Stats(); st.InFlight != 0 {
		t.Fatalf("undecided requests hold %d permits", st.InFlight)
	}
}

// A request whose handler panics ends its permit without a latency sample: the limit
// learns nothing from it. The same requests served normally move the limit.
func TestPanicDropsThePermit(t *testing.T) {
	run := func(panics bool) overload.Stats {
		clk := clocktest.New(start)
		lim, err := overload.New(overload.Config{MinLimit: 1, MaxLimit: 100, InitialLimit: 2, Window: time.Nanosecond, MinSamples: 1, Clock: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		st, _ := newStore(t)
		h := mustNew(t, Config{Limiter: st, Overload: lim, Policies: []Policy{{Name: "ip", Limit: sluice.PerHour(100)}}}).Handler(
			http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				clk.Advance(time.Millisecond)
				if panics {
					panic(http.ErrAbortHandler)
				}
			}))
		for range 8 {
			func() {
				defer func() {
					if v := recover(); (v != nil) != panics {
						t.Fatalf("recovered %v", v)
					}
				}()
				do(h, "GET", "/", "192.0.2.1:1")
			}()
		}
		return lim.Stats()
	}
	served, panicked := run(false), run(true)
	if panicked.InFlight != 0 || served.InFlight != 0 {
		t.Fatalf("in flight after the handlers ended: %d panicking, %d served", panicked.InFlight, served.InFlight)
	}
	if panicked.Limit != 2 {
		t.Errorf("the limit moved on dropped permits: %d, want 2", panicked.Limit)
	}
	if served.Limit == 2 {
		t.Errorf("the limit did not move on released permits (the test shows nothing)")
	}
}

// With Config.Trust, the trust verdict is taken once and every reading built on the same
// ClientIP uses it; a reading built on another ClientIP tests the peer itself.
func TestTrustVerdictOnce(t *testing.T) {
	ip := &keys.ClientIP{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")}
	other := &keys.ClientIP{}
	tier, otherTier := TrustedHeader(ip, "X-Plan"), TrustedHeader(other, "X-Plan")
	crit := TrustedCriticality(ip, "X-Criticality")
	var got []string
	st, _ := newStore(t)
	h := mustNew(t, Config{Limiter: st, Trust: ip, Policies: []Policy{{Name: "ip", Limit: sluice.PerHour(100)}}}).Handler(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, ok := crit(r)
			got = append(got, tier(r)+"|"+otherTier(r)+"|"+c.String()+"|"+map[bool]string{true: "claimed", false: "-"}[ok])
		}))
	do(h, "GET", "/", "10.0.0.1:1", "X-Plan", "pro", "X-Criticality", "critical")
	do(h, "GET", "/", "192.0.2.1:1", "X-Plan", "pro", "X-Criticality", "critical")
	do(h, "GET", "/", "10.0.0.1:1", "X-Criticality", "nonsense")
	want := []string{"pro||critical|claimed", "||default|-", "||default|-"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("readings %q, want %q", got, want)
	}
}

func TestCriticalityHeaderTrust(t *testing.T) {
	st, _ := newStore(t)
	ip := &keys.ClientIP{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")}
	lim := pinned(t, 5, 20, 0) // Default requests up to 4 in flight, Critical ones up to 5
	g := newGate(t)
	h := mustNew(t, Config{Limiter: st, Overload: lim, Trust: ip, Criticality: TrustedCriticality(ip, "X-Criticality"),
		Policies: []Policy{{Name: "ip", Limit: sluice.PerHour(1000), Key: ByIP(ip)}}}).Handler(g)
	for i := range 4 {
		if got := g.send(h, "/", "192.0.2.1:1"); got != "held" {
			t.Fatalf("request %d: %s", i, got)
		}
	}
	steps := []struct {
		remote, crit, want string
	}{
		{"192.0.2.1:1", "critical", "Service Unavailable"}, // an untrusted claim is ignored: Default
		{"10.0.0.1:1", "urgent", "Service Unavailable"},    // garbage from a trusted peer: Default, not an error
		{"10.0.0.1:1", "", "Service Unavailable"},
		{"10.0.0.1:1", "critical", "held"}, // a trusted claim counts
	}
	for _, s := range steps {
		if got := g.send(h, "/", s.remote, "X-Criticality", s.crit); got != s.want {
			t.Errorf("from %s claiming %q: %s, want %s", s.remote, s.crit, got, s.want)
		}
	}
}

// The readings use the verdict the middleware took, rather than testing the peer again:
// a verdict that says "trusted" for any peer is believed by every reading built on the
// same ClientIP, and by no other.
func TestReadingsUseTheVerdict(t *testing.T) {
	ip := &keys.ClientIP{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")}
	other := &keys.ClientIP{TrustedProxies: mustPrefixes(t, "10.0.0.0/8")}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.1:1" // not a trusted proxy
	r.Header.Set("X-Plan", "pro")
	r.Header.Set("X-User-ID", "alice")
	r.Header.Set("X-Criticality", "critical")
	r = r.WithContext(context.WithValue(r.Context(), verdictKey{}, &verdict{c: ip, trusted: true}))
	if got := TrustedHeader(ip, "X-Plan")(r); got != "pro" {
		t.Errorf("TrustedHeader on the verdict's ClientIP: %q, want pro", got)
	}
	if id, _ := ByTrustedHeader(ip, "X-User-ID", keys.User)(r); id.ID != "alice" {
		t.Errorf("ByTrustedHeader on the verdict's ClientIP: %v, want alice", id)
	}
	if c, ok := TrustedCriticality(ip, "X-Criticality")(r); !ok || c != overload.Critical {
		t.Errorf("TrustedCriticality on the verdict's ClientIP: %v %v, want critical", c, ok)
	}
	if got := TrustedHeader(other, "X-Plan")(r); got != "" {
		t.Errorf("TrustedHeader on another ClientIP: %q, want it to test the peer itself", got)
	}
}
