package httplimit

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/memory"
)

// start is deliberately not aligned to a second, so window boundaries and rounding of
// Retry-After are exercised.
var start = time.Date(2026, 11, 1, 5, 59, 0, 123_457_000, time.UTC)

// newStore returns a real memory store on a fake clock.
func newStore(t testing.TB) (*memory.Store, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(start)
	s := memory.New(memory.WithClock(clk.Now))
	t.Cleanup(func() { s.Close() })
	return s, clk
}

// recorder is a decorator that remembers every request passed to the limiter it wraps, so
// a test can inspect exactly what reached the layers below: the keys, and how the
// middleware grouped its policies into Decide calls.
type recorder struct {
	sluice.Limiter
	mu    sync.Mutex
	keys  []string
	calls [][]sluice.Request
}

func (r *recorder) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	r.mu.Lock()
	r.calls = append(r.calls, slices.Clone(reqs))
	for _, q := range reqs {
		r.keys = append(r.keys, q.Key)
	}
	r.mu.Unlock()
	return r.Limiter.Decide(ctx, reqs, ds)
}

// brokenStore is a Limiter that always fails with err: a store error that no real store can be
// made to return on demand (for example one wrapping sluice.ErrStoreUnavailable, which is
// what a failover decorator returns when it fails closed).
type brokenStore struct{ err error }

func (f brokenStore) Decide(context.Context, []sluice.Request, []sluice.Decision) (sluice.Report, error) {
	return sluice.Report{Kind: sluice.KindOf(f.err)}, f.err
}
func (f brokenStore) Reserve(context.Context, string, sluice.Limit, int64) (sluice.Reservation, error) {
	return sluice.Reservation{}, f.err
}
func (f brokenStore) Reset(context.Context, string, sluice.Limit) error { return f.err }
func (f brokenStore) Settle(context.Context, string, sluice.Limit, sluice.ReservationID, int64) (sluice.Decision, error) {
	return sluice.Decision{}, f.err
}

func (f brokenStore) Release(context.Context, string, sluice.Limit, sluice.LeaseID) (bool, error) {
	return false, f.err
}

// look returns the state of key under limit as lim sees it, spending nothing.
func look(t *testing.T, lim sluice.Limiter, key string, limit sluice.Limit) sluice.Decision {
	t.Helper()
	d, err := sluice.AllowN(context.Background(), lim, key, limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mustNew(t testing.TB, cfg Config) *Middleware {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write([]byte("ok"))
})

// do serves one request through h with the given remote address and headers.
func do(h http.Handler, method, target, remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	if remote != "" {
		r.RemoteAddr = remote
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// sfItem is one parsed RateLimit or RateLimit-Policy item.
type sfItem struct {
	name   string
	params map[string]any
}

// parseList parses a header with a real RFC 9651 parser, failing the test on any syntax
// error, and checks every item is a String with parameters.
func parseList(t *testing.T, h http.Header, name string) []sfItem {
	t.Helper()
	values := h.Values(name)
	if len(values) == 0 {
		t.Fatalf("no %s header", name)
	}
	list, err := httpsfv.UnmarshalList(values)
	if err != nil {
		t.Fatalf("%s %q does not parse as an RFC 9651 List: %v", name, values, err)
	}
	var out []sfItem
	for _, m := range list {
		it, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("%s member %#v is not an Item", name, m)
		}
		s, ok := it.Value.(string)
		if !ok {
			t.Fatalf("%s item value %#v is not a String", name, it.Value)
		}
		p := map[string]any{}
		for _, k := range it.Params.Names() {
			p[k], _ = it.Params.Get(k)
		}
		out = append(out, sfItem{name: s, params: p})
	}
	return out
}

// decodeProblem checks w is an RFC 9457 problem+json response and decodes it.
func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) *Problem {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if p.Status != w.Code {
		t.Errorf("problem status %d, response status %d", p.Status, w.Code)
	}
	return &p
}

func retryAfter(t *testing.T, w *httptest.ResponseRecorder) time.Duration {
	t.Helper()
	v := w.Header().Get("Retry-After")
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("Retry-After %q is not positive delay-seconds", v)
	}
	return time.Duration(n) * time.Second
}
