package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestProxySettle: through `sluice proxy`, a policy that settles costs spends the
// X-Cost-Estimate a trusted proxy sent (or the route's fixed estimate) up front and the cost the
// upstream reports in its X-Cost trailer or header when the response ends: an
// under-estimate is charged, an over-estimate refunded, an overrun denies the next
// request, and a malformed estimate is 400. On memory and Redis.
func TestProxySettle(t *testing.T) {
	for _, st := range pipelineStores[:2] {
		t.Run(st.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				cost := r.URL.Query().Get("cost")
				if r.URL.Query().Get("trailer") != "" {
					w.Header().Set("Trailer", "X-Cost")
					io.WriteString(w, "streamed completion")
					w.Header().Set("X-Cost", cost)
					return
				}
				w.Header().Set("X-Cost", cost)
				io.WriteString(w, "completion")
			}))
			defer up.Close()
			// The client is the trusted proxy: it sets X-User-ID and X-Cost-Estimate.
			cfg := writeConfig(t, "p.yaml", `identity: {trusted_proxies: [127.0.0.1]}
policies:
  - name: tokens
    key: user
    algorithm: token_bucket
    rate: 100
    period: hour
    settle: {ttl: 1m}
    routes:
      "POST /fixed": {rate: 1000, period: hour, estimate: 25}
`)
			args := append([]string{"--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg}, pipelineFlags...)
			base := "http://" + startedProxy(t, append(args, st.flags(t)...)...)
			send := func(method, path, estimate string) (int, string) {
				t.Helper()
				req, _ := http.NewRequest(method, base+path, nil)
				req.Header.Set("X-User-ID", "alice")
				if estimate != "" {
					req.Header.Set("X-Cost-Estimate", estimate)
				}
				rp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, rp.Body)
				rp.Body.Close()
				return rp.StatusCode, rp.Header.Get("RateLimit")
			}
			remaining := func(rl, name string) int64 {
				t.Helper()
				for _, m := range strings.Split(rl, ", ") {
					if strings.HasPrefix(m, `"`+name+`";r=`) {
						v, _ := strconv.ParseInt(strings.Split(strings.TrimPrefix(m, `"`+name+`";r=`), ";")[0], 10, 64)
						return v
					}
				}
				t.Fatalf("no %s in RateLimit %q", name, rl)
				return 0
			}
			// Estimate 10, actual 40 in a trailer: 30 more are charged when it ends.
			if code, rl := send("GET", "/chat?trailer=1&cost=40", "10"); code != 200 || remaining(rl, "tokens") != 90 {
				t.Fatalf("first: %d %q, want 200 with r=90 (the estimate spent)", code, rl)
			}
			// Estimate 20, actual 5 in a header: 15 come back.
			if code, rl := send("GET", "/chat?cost=5", "20"); code != 200 || remaining(rl, "tokens") != 40 {
				t.Fatalf("second: %d %q, want r=40 (60 left after the first's charge, less this estimate)", code, rl)
			}
			// Without the header: the route's fixed estimate (25) for its limit, the
			// policy's (1) for its own; actual 0 gives both back.
			if code, rl := send("POST", "/fixed?cost=0", ""); code != 200 || remaining(rl, "tokens") != 54 || remaining(rl, "tokens POST /fixed") != 975 {
				t.Fatalf("fixed estimate: %d %q, want tokens r=54 and the route's r=975", code, rl)
			}
			if code, rl := send("POST", "/fixed?cost=0", ""); code != 200 || remaining(rl, "tokens") != 54 || remaining(rl, "tokens POST /fixed") != 975 {
				t.Fatalf("after a refund of the fixed estimates: %d %q, want the same again", code, rl)
			}
			if code, _ := send("GET", "/chat?cost=1", "lots"); code != 400 {
				t.Fatalf("malformed estimate: %d, want 400", code)
			}
			// An overrun: estimate 1, actual 500: the bucket is emptied, the next is denied.
			if code, _ := send("GET", "/chat?cost=500", "1"); code != 200 {
				t.Fatalf("overrun: %d", code)
			}
			if code, rl := send("GET", "/chat?cost=1", "1"); code != 429 || remaining(rl, "tokens") != 0 {
				t.Fatalf("after the overrun: %d %q, want 429 with r=0", code, rl)
			}
		})
	}
}

// TestServeJSONSettle: through `sluice serve`'s JSON API, a check with a cost under a
// policy that settles returns a reservation; POST /v1/settle refunds an over-estimate and
// charges an under-estimate; a second settlement is 409, an unknown reservation 404, a
// negative cost 400, and none of them changes the state.
func TestServeJSONSettle(t *testing.T) {
	for _, st := range pipelineStores[:2] {
		t.Run(st.name, func(t *testing.T) {
			cfg := writeConfig(t, "sluice.yaml", `policies:
  - {name: tokens, key: user, algorithm: token_bucket, rate: 100, period: day, settle: {ttl: 1m}}
`)
			base, _, _ := started(t, append(append([]string{"--config", cfg}, pipelineFlags...), st.flags(t)...)...)
			post := func(path, body string) (int, map[string]any) { return postJSON(t, base+path, body) }
			check := func(cost int) (string, float64) {
				t.Helper()
				code, out := post("/v1/check", `{"policy":"tokens","key":"u1","cost":`+strconv.Itoa(cost)+`}`)
				l := out["limits"].([]any)[0].(map[string]any)
				res, _ := l["reservation"].(string)
				if code != 200 || res == "" {
					t.Fatalf("check of %d: %d %v", cost, code, out)
				}
				return res, l["remaining"].(float64)
			}
			peek := func() float64 {
				_, out := post("/v1/peek", `{"policy":"tokens","key":"u1"}`)
				return out["limits"].([]any)[0].(map[string]any)["remaining"].(float64)
			}
			settle := func(res string, cost int) (int, map[string]any) {
				return post("/v1/settle", `{"policy":"tokens","key":"u1","reservation":"`+res+`","cost":`+strconv.Itoa(cost)+`}`)
			}
			r1, rem := check(30)
			if rem != 70 {
				t.Fatalf("after reserving 30: %v", rem)
			}
			if code, out := settle(r1, 10); code != 200 || out["settled"] != true || out["limit"].(map[string]any)["remaining"].(float64) != 90 {
				t.Fatalf("settle 10 of 30: %d %v, want 90 remaining", code, out)
			}
			r2, _ := check(5)
			if code, out := settle(r2, 45); code != 200 || out["limit"].(map[string]any)["remaining"].(float64) != 45 {
				t.Fatalf("settle 45 of 5: %d %v, want 45 remaining", code, out)
			}
			for _, c := range []struct {
				what string
				res  string
				cost int
				code int
			}{
				{"second settlement", r2, 1, 409},
				{"unknown reservation", "zzzz", 1, 404},
				{"negative cost", r1, -1, 400},
			} {
				code, out := settle(c.res, c.cost)
				if code != c.code {
					t.Errorf("%s: %d %v, want %d", c.what, code, out, c.code)
				}
				// The reason is given once: "(never made, or past its settle TTL ...)".
				if d, _ := out["detail"].(string); strings.Count(d, "never made") > 1 {
					t.Errorf("%s: detail %q gives its reason more than once", c.what, d)
				}
				if got := peek(); got != 45 {
					t.Errorf("%s changed the state: %v remaining, want 45", c.what, got)
				}
			}
		})
	}
}
