package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRateLimitHeadersAgreeAcrossFrontEnds: the same policy, decided through `sluice
// proxy` and through `sluice serve`'s JSON API, answers with the same RateLimit-Policy,
// RateLimit and Retry-After, allowed and denied: the fields have one writer.
func TestRateLimitHeadersAgreeAcrossFrontEnds(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfg := writeConfig(t, "p.yaml", `policies:
  - {name: api, key: ip, algorithm: token_bucket, rate: 2, period: hour, burst: 3}
`)
	proxy := "http://" + startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg)
	serve, _, _ := started(t, "--config", cfg)
	fields := []string{"RateLimit-Policy", "RateLimit", "Retry-After"}
	for i, want := range []int{200, 200, 200, 429} {
		pr, err := http.Get(proxy + "/x")
		if err != nil {
			t.Fatal(err)
		}
		pr.Body.Close()
		sr, err := http.Post(serve+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","key":"127.0.0.1"}`))
		if err != nil {
			t.Fatal(err)
		}
		sr.Body.Close()
		if pr.StatusCode != want || sr.StatusCode != want {
			t.Fatalf("request %d: proxy %d, JSON API %d, want %d", i, pr.StatusCode, sr.StatusCode, want)
		}
		for _, f := range fields {
			if p, s := pr.Header.Values(f), sr.Header.Values(f); strings.Join(p, "|") != strings.Join(s, "|") {
				t.Errorf("request %d: %s: proxy %q, JSON API %q", i, f, p, s)
			}
		}
		if want == 429 && pr.Header.Get("Retry-After") == "" {
			t.Errorf("request %d: a refusal without Retry-After", i)
		}
	}
}
