package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestRouteLimitSpellings: a POST /v1/items route limit applies to every spelling of the
// path an upstream serves as /v1/items (a trailing slash, ;parameters, an escaped slash,
// letter case, merged slashes, dot segments), through `sluice proxy` and through `sluice
// serve`'s JSON API alike; other paths stay outside it.
func TestRouteLimitSpellings(t *testing.T) {
	var mu sync.Mutex
	var got []string // the paths the upstream received
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.RawPath+"|"+r.URL.Path)
		mu.Unlock()
	}))
	defer up.Close()
	cfg := writeConfig(t, "p.yaml", `policies:
  - name: api
    key: ip
    rate: 1000
    period: hour
    routes:
      "POST /v1/items": {rate: 100, period: hour}
      "/v1/export/": {rate: 100, period: hour}
`)
	proxy := "http://" + startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg)
	serve, _, _ := started(t, "--config", cfg)
	for _, c := range []struct {
		method, path, route string
	}{
		{"POST", "/v1/items", "POST /v1/items"},
		{"POST", "/v1/items/", "POST /v1/items"},
		{"POST", "/v1/items;x=y", "POST /v1/items"},
		{"POST", "/v1%2Fitems", "POST /v1/items"},
		{"POST", "/V1/ITEMS", "POST /v1/items"},
		{"POST", "/v1//items", "POST /v1/items"},
		{"GET", "/v1/export", "/v1/export/"},
		{"GET", "/v1/export/a.csv", "/v1/export/"},
		{"GET", "/v1/items", ""},
		{"POST", "/v1/itemsx", ""},
	} {
		want := `"api";q=1000;w=3600`
		if c.route != "" {
			want += `, "api ` + c.route + `";q=100;w=3600`
		}
		req, _ := http.NewRequest(c.method, proxy+c.path, nil)
		rp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rp.Body.Close()
		if p := rp.Header.Get("RateLimit-Policy"); rp.StatusCode != 200 || p != want {
			t.Errorf("proxy %s %s: %d, RateLimit-Policy %q, want %q", c.method, c.path, rp.StatusCode, p, want)
		}
		body := `{"policy":"api","key":"127.0.0.1","method":"` + c.method + `","path":"` + c.path + `"}`
		sr, err := http.Post(serve+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		sr.Body.Close()
		if p := sr.Header.Get("RateLimit-Policy"); sr.StatusCode != 200 || p != want {
			t.Errorf("JSON API %s %s: %d, RateLimit-Policy %q, want %q", c.method, c.path, sr.StatusCode, p, want)
		}
	}
	// The upstream gets the path as the client sent it: normalising only chose the route.
	mu.Lock()
	defer mu.Unlock()
	if len(got) < 4 || got[3] != "/v1%2Fitems|/v1/items" {
		t.Errorf("upstream received %q", got)
	}
}

// TestRouteLimitsOfTwoPolicies: one policy's route never hides another's. A request to
// POST /v1/items meets the "/v1/" route of one policy and the "POST /v1/items" route of
// another, through `sluice proxy` and through the JSON API alike.
func TestRouteLimitsOfTwoPolicies(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfg := writeConfig(t, "p.yaml", `policies:
  - name: broad
    key: ip
    rate: 1000
    period: hour
    routes:
      "/v1/": {rate: 100, period: hour}
  - name: narrow
    key: ip
    rate: 1000
    period: hour
    routes:
      "POST /v1/items": {rate: 10, period: hour}
`)
	proxy := "http://" + startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg)
	serve, _, _ := started(t, "--config", cfg)
	rp, err := http.Post(proxy+"/v1/items", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	rp.Body.Close()
	want := `"broad";q=1000;w=3600, "broad /v1/";q=100;w=3600, "narrow";q=1000;w=3600, "narrow POST /v1/items";q=10;w=3600`
	if p := rp.Header.Get("RateLimit-Policy"); p != want {
		t.Errorf("proxy: RateLimit-Policy %q, want %q", p, want)
	}
	for policy, want := range map[string]string{
		"broad":  `"broad";q=1000;w=3600, "broad /v1/";q=100;w=3600`,
		"narrow": `"narrow";q=1000;w=3600, "narrow POST /v1/items";q=10;w=3600`,
	} {
		body := `{"policy":"` + policy + `","key":"127.0.0.1","method":"POST","path":"/v1/items"}`
		sr, err := http.Post(serve+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		sr.Body.Close()
		if p := sr.Header.Get("RateLimit-Policy"); p != want {
			t.Errorf("JSON API, policy %s: RateLimit-Policy %q, want %q", policy, p, want)
		}
	}
}
