package tierapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/stack"
)

func TestTiers(t *testing.T) {
	st, err := stack.Open(nil, stack.Options{Sampling: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := Handler(Options{Limiter: st.Limiter(), Secret: []byte("example-secret-0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	send := func(method, path, key string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	tests := []struct {
		method, path, key string
		status            int
		policies          string // names in the RateLimit header (shadow policies stay out)
	}{
		{"GET", "/v1/items", "", 401, `"per-ip"`},
		{"GET", "/v1/items", "wrong", 401, `"per-ip"`}, // unknown keys are not tracked per key
		{"GET", "/v1/items/7", "demo-free-key", 200, `"per-ip" "per-key"`},
		{"POST", "/v1/orders", "demo-free-key", 201, `"per-ip" "per-key" "orders"`},
		{"POST", "/v1/orders", "demo-free-key", 201, `"per-ip" "per-key" "orders"`},
		{"POST", "/v1/orders", "demo-free-key", 429, `"per-ip" "per-key" "orders"`}, // free: 2 orders a minute
		{"POST", "/v1/orders", "demo-pro-key", 201, `"per-ip" "per-key" "orders"`},
		{"GET", "/v1/items", "demo-enterprise-key", 200, `"per-ip" "per-key"`}, // no daily policy for enterprise
	}
	for i, tt := range tests {
		resp := send(tt.method, tt.path, tt.key)
		var names []string
		for item := range strings.SplitSeq(resp.Header.Get("RateLimit"), ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(item), ";")
			names = append(names, name)
		}
		if resp.StatusCode != tt.status || strings.Join(names, " ") != tt.policies {
			t.Errorf("%d: %s %s key %q: %d %v, want %d %s", i, tt.method, tt.path, tt.key, resp.StatusCode, names, tt.status, tt.policies)
		}
	}
}
