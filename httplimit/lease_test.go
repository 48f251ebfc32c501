package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestConcurrencyLease: a concurrency policy admits one request in flight per client; a
// second one while the first is in its handler is refused with 429 and
// qu="concurrent-requests" in RateLimit-Policy; the lease is released when the handler
// returns, and when it panics.
func TestConcurrencyLease(t *testing.T) {
	store, _ := newStore(t)
	m, err := New(Config{Limiter: store, Policies: []Policy{{Name: "inflight", Limit: sluice.InFlight(1, time.Hour)}}})
	if err != nil {
		t.Fatal(err)
	}
	inside := make(chan struct{})
	proceed := make(chan struct{})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			inside <- struct{}{}
			<-proceed
		case "/panic":
			panic(http.ErrAbortHandler)
		}
	}))
	serve := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		func() {
			defer func() { _ = recover() }()
			h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		}()
		return w
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- serve("/slow") }()
	<-inside
	w := serve("/fast")
	if w.Code != http.StatusTooManyRequests {
		t.Fatalf("second request in flight: %d, want 429", w.Code)
	}
	if got := w.Header().Get(HeaderRateLimitPolicy); got != `"inflight";q=1;qu="concurrent-requests"` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	if got := w.Header().Get(HeaderRateLimit); !strings.Contains(got, "r=0") {
		t.Fatalf("RateLimit %q: want r=0", got)
	}
	close(proceed)
	if w := <-done; w.Code != http.StatusOK {
		t.Fatalf("first request: %d", w.Code)
	}
	if w := serve("/panic"); w.Code != http.StatusOK {
		t.Fatalf("after the first returned: %d, want it to pass", w.Code)
	}
	// The panicking handler released its lease too.
	if w := serve("/fast"); w.Code != http.StatusOK {
		t.Fatalf("after a handler panicked: %d, want its lease released", w.Code)
	}
}
