package httplimit

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
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

// recorder is a decorator that remembers every key passed to the limiter it wraps, so a
// test can inspect exactly what reached the store.
type recorder struct {
	sluice.Limiter
	mu   sync.Mutex
	keys []string
}

func (r *recorder) note(k string) { r.mu.Lock(); r.keys = append(r.keys, k); r.mu.Unlock() }

func (r *recorder) AllowN(ctx context.Context, key string, l sluice.Limit, n int64) (sluice.Decision, error) {
	r.note(key)
	return r.Limiter.AllowN(ctx, key, l, n)
}

func (r *recorder) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	for _, q := range reqs {
		r.note(q.Key)
	}
	return r.Limiter.(sluice.MultiLimiter).AllowMulti(ctx, reqs)
}

// sequential hides a store's AllowMulti, as a store without atomic batches would.
type sequential struct{ sluice.Limiter }

// brokenStore is a Limiter that always fails with err: a store error that no real store can be
// made to return on demand (for example one wrapping sluice.ErrStoreUnavailable, which is
// what a failover decorator returns when it fails closed).
type brokenStore struct{ err error }

func (f brokenStore) AllowN(context.Context, string, sluice.Limit, int64) (sluice.Decision, error) {
	return sluice.Decision{}, f.err
}
func (f brokenStore) Reset(context.Context, string, sluice.Limit) error { return f.err }

// notAtomic wraps a store whose AllowMulti cannot make a batch atomic (as Redis Cluster
// answers for keys in different slots): it spends nothing and says ErrNotAtomic.
type notAtomic struct {
	sluice.Limiter
	calls atomic.Int64
}

func (n *notAtomic) AllowMulti(context.Context, []sluice.Request) ([]sluice.Decision, error) {
	n.calls.Add(1)
	return nil, sluice.ErrNotAtomic
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
