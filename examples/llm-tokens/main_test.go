package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/memory"
)

// TestTokensPerMinute: the prompt's tokens are spent up front and the completion's when
// the response ends, so a call whose completion overran the budget denies the next call
// although its estimate alone would have fitted.
func TestTokensPerMinute(t *testing.T) {
	clk := clocktest.New(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	store := memory.New(memory.WithClock(clk.Now))
	defer store.Close()
	srv := httptest.NewServer(handler(store))
	defer srv.Close()
	prompt := strings.Repeat("x", 400) // 100 tokens
	call := func(maxTokens string) int {
		rp, err := http.Post(srv.URL+"/v1/complete?max_tokens="+maxTokens, "text/plain", strings.NewReader(prompt))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, rp.Body)
		rp.Body.Close()
		return rp.StatusCode
	}
	left := func() int64 {
		d, err := sluice.AllowN(context.Background(), store, "user:", tpm, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	if code := call("100"); code != 200 || left() != 2000-100-100 {
		t.Fatalf("first call: %d, %d left; want 200 and 1800 (100 prompt + 100 completion)", code, left())
	}
	// 1800 completion tokens: admitted on its 100-token prompt, then charged in full.
	if code := call("1800"); code != 200 || left() != 0 {
		t.Fatalf("expensive call: %d, %d left; want 200 and the budget spent", code, left())
	}
	if code := call("1"); code != 429 {
		t.Fatalf("call after the overrun: %d, want 429", code)
	}
	clk.Advance(3 * time.Second) // 100 tokens refill
	if code := call("1"); code != 200 {
		t.Fatalf("after the refill: %d, want 200", code)
	}
}
