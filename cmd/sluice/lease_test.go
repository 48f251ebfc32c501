package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/poll"
)

// TestProxyConcurrency: through `sluice proxy` with a slow upstream and a concurrency
// limit of 2 per client: a third request while two are in flight gets 429, advertised as
// qu="concurrent-requests"; once one response has been sent, the next request passes; a
// client that goes away mid-request frees its slot too. On memory, Redis and a Redis
// Cluster.
func TestProxyConcurrency(t *testing.T) {
	for _, st := range pipelineStores {
		t.Run(st.name, func(t *testing.T) {
			entered := make(chan struct{}, 8)
			finish := make(chan struct{}, 8)
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered <- struct{}{}
				select {
				case <-finish:
					io.WriteString(w, "done")
				case <-r.Context().Done():
				}
			}))
			defer up.Close()
			defer close(finish)
			cfg := writeConfig(t, "p.yaml", `policies:
  - {name: inflight, key: ip, algorithm: concurrency, rate: 2, lease: 30s}
`)
			args := append([]string{"--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg}, pipelineFlags...)
			base := "http://" + startedProxy(t, append(args, st.flags(t)...)...)
			get := func(ctx context.Context) answer {
				req, _ := http.NewRequestWithContext(ctx, "GET", base+"/slow", nil)
				rp, err := http.DefaultClient.Do(req)
				if err != nil {
					return answer{err: err}
				}
				io.Copy(io.Discard, rp.Body)
				rp.Body.Close()
				return answer{code: rp.StatusCode}
			}
			first, second := make(chan answer, 1), make(chan answer, 1)
			go func() { first <- get(context.Background()) }()
			<-entered
			gone, leave := context.WithCancel(context.Background())
			go func() { second <- get(gone) }()
			<-entered

			req, _ := http.NewRequest("GET", base+"/slow", nil)
			rp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			rp.Body.Close()
			if rp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("third request in flight: %d, want 429", rp.StatusCode)
			}
			if got := rp.Header.Get("RateLimit-Policy"); got != `"inflight";q=2;qu="concurrent-requests"` {
				t.Fatalf("RateLimit-Policy %q", got)
			}
			if got := rp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"inflight";r=0;t=`) {
				t.Fatalf("RateLimit %q", got)
			}

			finish <- struct{}{}
			if a := <-first; a.err != nil || a.code != 200 {
				t.Fatalf("first request: %+v", a)
			}
			// The proxy releases the lease once the handler has returned, a moment after
			// the last byte: the next request passes then.
			third := make(chan answer, 1)
			go func() { third <- passes(t, get) }()
			<-entered
			// The second client goes away; its slot frees when the proxy sees it.
			leave()
			if a := <-second; a.err == nil {
				t.Fatalf("second request of a client that went away: %+v", a)
			}
			fourth := make(chan answer, 1)
			go func() { fourth <- passes(t, get) }()
			<-entered
			finish <- struct{}{}
			finish <- struct{}{}
			for _, c := range []chan answer{third, fourth} {
				if a := <-c; a.err != nil || a.code != 200 {
					t.Fatalf("request after a slot freed: %+v", a)
				}
			}
		})
	}
}

// answer is the outcome of one request through the proxy.
type answer struct {
	code int
	err  error
}

// passes makes get's request until it is not refused with 429, for at most 5s: a lease
// is released just after the response that held it ends.
func passes(t *testing.T, get func(context.Context) answer) answer {
	t.Helper()
	var a answer
	poll.UntilDescribed(t, 5*time.Second, "a request not refused with 429", func() bool {
		a = get(context.Background())
		return a.err != nil || a.code != http.StatusTooManyRequests
	}, func() string { return fmt.Sprint(a.code) })
	return a
}

// TestServeJSONLease: through `sluice serve`'s JSON API, a check under a concurrency
// policy returns a lease; a check while the slot is held is 429; POST /v1/release frees
// it (released true), a second release and a release of an unknown lease answer
// released false and change nothing, and a malformed lease is 400.
func TestServeJSONLease(t *testing.T) {
	for _, st := range pipelineStores[:2] {
		t.Run(st.name, func(t *testing.T) {
			cfg := writeConfig(t, "sluice.yaml", `policies:
  - {name: jobs, key: user, algorithm: concurrency, rate: 1, lease: 1m}
`)
			base, _, _ := started(t, append(append([]string{"--config", cfg}, pipelineFlags...), st.flags(t)...)...)
			post := func(path, body string) (int, map[string]any) { return postJSON(t, base+path, body) }
			lease := func(out map[string]any) string {
				ls, _ := out["limits"].([]any)
				if len(ls) != 1 {
					return ""
				}
				s, _ := ls[0].(map[string]any)["lease"].(string)
				return s
			}
			check := `{"policy":"jobs","key":"u1"}`
			code, out := post("/v1/check", check)
			id := lease(out)
			if code != 200 || id == "" {
				t.Fatalf("first check: %d %v, want 200 with a lease", code, out)
			}
			if l := out["limits"].([]any)[0].(map[string]any); l["lease_ttl"] != "1m0s" || l["period"] != nil {
				t.Fatalf("limit status %v: want lease_ttl 1m0s and no period", l)
			}
			if code, out := post("/v1/check", check); code != 429 || lease(out) != "" {
				t.Fatalf("check while held: %d %v, want 429 without a lease", code, out)
			}
			if code, out := post("/v1/check", `{"policy":"jobs","key":"u2"}`); code != 200 || lease(out) == "" {
				t.Fatalf("another identity: %d %v", code, out)
			}
			for _, c := range []struct {
				body     string
				code     int
				released any
			}{
				{`{"policy":"jobs","key":"u1","lease":"zzzzzz"}`, 200, false}, // unknown
				{`{"policy":"jobs","key":"u1","lease":"` + id + `"}`, 200, true},
				{`{"policy":"jobs","key":"u1","lease":"` + id + `"}`, 200, false}, // twice
				{`{"policy":"jobs","key":"u1","lease":"not a lease"}`, 400, nil},
				{`{"policy":"jobs","key":"u1"}`, 400, nil},
				{`{"policy":"nope","key":"u1","lease":"` + id + `"}`, 404, nil},
			} {
				code, out := post("/v1/release", c.body)
				if code != c.code || out["released"] != c.released {
					t.Errorf("release %s: %d %v, want %d released %v", c.body, code, out, c.code, c.released)
				}
			}
			if code, out := post("/v1/check", check); code != 200 || lease(out) == "" {
				t.Fatalf("check after the release: %d %v, want 200 with a lease", code, out)
			}
		})
	}
}

// postJSON posts body to url as JSON and returns the answer's status and its JSON object.
func postJSON(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	rp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Body.Close()
	out := map[string]any{}
	if err := json.NewDecoder(rp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return rp.StatusCode, out
}

// TestOverrideLease: `sluice override set --lease` gives one identity of a concurrency
// policy more slots, through `sluice serve` on memory and on Redis: u1 then holds two
// leases at once, the third check is 429, and another identity still has the policy's one.
func TestOverrideLease(t *testing.T) {
	for _, st := range pipelineStores[:2] {
		t.Run(st.name, func(t *testing.T) {
			t.Setenv("SLUICE_ADMIN_TOKEN", "override-test-token-0123456789")
			cfg := writeConfig(t, "sluice.yaml", `policies:
  - {name: jobs, key: user, algorithm: concurrency, rate: 1, lease: 1m}
`)
			base, _, _ := started(t, append(append([]string{"--config", cfg}, pipelineFlags...), st.flags(t)...)...)
			var out, errb syncBuffer
			if code := run(context.Background(), []string{"sluice", "override", "set", "--server", base, "jobs", "u1", "--rate", "2", "--lease", "1m"}, &out, &errb); code != 0 {
				t.Fatalf("sluice override set --lease: exit %d: %s %s", code, out.String(), errb.String())
			}
			codes := func(key string, n int) []int {
				var cs []int
				for range n {
					code, _ := postJSON(t, base+"/v1/check", `{"policy":"jobs","key":"`+key+`"}`)
					cs = append(cs, code)
				}
				return cs
			}
			if got := codes("u1", 3); !slices.Equal(got, []int{200, 200, 429}) {
				t.Errorf("u1 under its override of 2 slots: %v, want [200 200 429]", got)
			}
			if got := codes("u2", 2); !slices.Equal(got, []int{200, 429}) {
				t.Errorf("u2 under the policy's 1 slot: %v, want [200 429]", got)
			}
		})
	}
}
