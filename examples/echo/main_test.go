package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/memory"
)

func TestEchoAdapter(t *testing.T) {
	store := memory.New()
	defer store.Close()
	e, err := newServer(store)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{200, 200, 200, 429} {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", "/search?q=x", nil))
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d", i, w.Code, want)
		}
		if w.Header().Get("RateLimit") == "" {
			t.Fatalf("request %d: no RateLimit header", i)
		}
		if want == http.StatusTooManyRequests && w.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("429 body type %q", w.Header().Get("Content-Type"))
		}
	}
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/hello/ann", nil))
	if w.Code != 200 || w.Body.String() != "hello ann\n" {
		t.Errorf("other route: %d %q", w.Code, w.Body)
	}
}
