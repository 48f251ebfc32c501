package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// failureModes are the ways a failure mode can be written: not at all, then each mode.
var failureModes = []string{"", "open", "closed", "local"}

// resolvedMode is the documented order: the policy's own mode, then --failure-mode, then
// store.failure_mode, then open.
func resolvedMode(policy, flag, store string) string {
	for _, m := range []string{policy, flag, store} {
		if m != "" {
			return m
		}
	}
	return "open"
}

// wantStatuses is what two requests of one client get under a limit of 2 an hour while
// Redis is down: open allows both, closed refuses both with 503, local decides in-process
// on store.local_share (0.5) of the limit, so the second is over it.
var wantStatuses = map[string][2]int{"open": {200, 200}, "closed": {503, 503}, "local": {200, 429}}

// failureConfig writes a policy file whose store block names mode (or no mode) with a
// local share of one half, and one policy per own mode (p-none names none).
func failureConfig(t *testing.T, store string, policies []string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("store: {local_share: 0.5")
	if store != "" {
		fmt.Fprintf(&b, ", failure_mode: %s", store)
	}
	b.WriteString("}\npolicies:\n")
	for _, p := range policies {
		fmt.Fprintf(&b, "  - {name: %s, key: ip, algorithm: gcra, rate: 2, period: hour", policyName(p))
		if p != "" {
			fmt.Fprintf(&b, ", failure_mode: %s", p)
		}
		b.WriteString("}\n")
	}
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func policyName(mode string) string {
	if mode == "" {
		return "p-none"
	}
	return "p-" + mode
}

// deadRedis returns the URL of a redis-server that was started and then killed: nothing
// answers there.
func deadRedis(t *testing.T) string {
	t.Helper()
	srv := redistest.Start(t)
	url := srv.URL()
	srv.Kill()
	return url
}

// TestFailureModeTable: with Redis killed, every combination of store.failure_mode ×
// a policy's own failure_mode × --failure-mode (4 × 4 × 4, each also unset) decides as
// the documented order says (the policy, then the flag, then the store block, then open),
// in serve's JSON API and in the proxy. Before the one resolution, a policy whose own mode
// equalled the store block's lost it to the flag (6 of the 64).
func TestFailureModeTable(t *testing.T) {
	redisURL := deadRedis(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	wrong := 0
	for _, store := range failureModes {
		for _, flag := range failureModes {
			args := []string{"--redis", redisURL, "--log-level", "error"}
			if flag != "" {
				args = append(args, "--failure-mode", flag)
			}
			name := fmt.Sprintf("store=%s/flag=%s", orUnset(store), orUnset(flag))
			t.Run("serve/"+name, func(t *testing.T) {
				base, _, _ := started(t, append(args, "--config", failureConfig(t, store, failureModes))...)
				for i, own := range failureModes {
					want := resolvedMode(own, flag, store)
					client := fmt.Sprintf("192.0.2.%d", i+1)
					for n, code := range wantStatuses[want] {
						rp, err := http.Post(base+"/v1/check", "application/json",
							strings.NewReader(fmt.Sprintf(`{"policy":%q,"key":%q}`, policyName(own), client)))
						if err != nil {
							t.Fatal(err)
						}
						body, _ := io.ReadAll(rp.Body)
						rp.Body.Close()
						if rp.StatusCode != code {
							wrong++
							t.Errorf("policy=%s request %d: %d, want %d (mode %s): %s", orUnset(own), n+1, rp.StatusCode, code, want, body)
						} else if code == 200 && !strings.Contains(string(body), `"decided_by":"`+want+`"`) {
							t.Errorf("policy=%s request %d: not decided by %s: %s", orUnset(own), n+1, want, body)
						}
					}
				}
			})
			for _, own := range failureModes {
				t.Run(fmt.Sprintf("proxy/%s/policy=%s", name, orUnset(own)), func(t *testing.T) {
					base := "http://" + startedProxy(t, append(args, "--upstream", up.URL, "--listen", "127.0.0.1:0",
						"--config", failureConfig(t, store, []string{own}))...)
					want := resolvedMode(own, flag, store)
					for n, code := range wantStatuses[want] {
						rp, err := http.Get(base + "/x")
						if err != nil {
							t.Fatal(err)
						}
						rp.Body.Close()
						if rp.StatusCode != code {
							wrong++
							t.Errorf("request %d: %d, want %d (mode %s)", n+1, rp.StatusCode, code, want)
						}
					}
				})
			}
		}
	}
	if wrong > 0 {
		t.Logf("%d wrong answers", wrong)
	}
}

func orUnset(m string) string {
	if m == "" {
		return "unset"
	}
	return m
}
