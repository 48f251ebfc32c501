package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

// hardDomain is issue 20's scenario: a per-user rule on "vip*" values and a per-address
// rule, decided together.
const hardDomain = `domain: hard
descriptors:
  - key: user
    value: "vip*"
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 5}
`

// longUser is a descriptor value of 48 KiB of the bytes every layer escapes.
var longUser = "vip" + strings.Repeat("%=/{}:", 8<<10)

// metricValue returns the sum of the samples of the named metric on base's /metrics.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	body := httpGet(t, base+"/metrics")
	var sum float64
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		var v float64
		json.Unmarshal([]byte(m[2]), &v)
		sum += v
	}
	return sum
}

// startedHard starts the binary on hardDomain with the pipeline's flags and a store's
// (storeFlags) and returns its HTTP base, a gRPC client of it and its log.
func startedHard(t *testing.T, storeFlags []string) (string, rlsv3.RateLimitServiceClient, *syncBuffer) {
	t.Helper()
	cfg := writeConfig(t, "hard.yaml", hardDomain)
	base, grpcAddr, log := started(t, append(append([]string{"--config", cfg}, pipelineFlags...), storeFlags...)...)
	return base, rlsClient(t, grpcAddr), log
}

// checkNoStoreError fails t if the service at base counted a store error or logged one at
// ERROR: what a decision turned into an error leaves.
func checkNoStoreError(t *testing.T, base string, log *syncBuffer) {
	t.Helper()
	if n := metricValue(t, base, "sluice_server_store_errors_total") + metricValue(t, base, "sluice_store_errors_total"); n != 0 {
		t.Errorf("%v store errors counted", n)
	}
	if strings.Contains(log.String(), "ERROR") {
		t.Errorf("an ERROR was logged:\n%.2000s", log.String())
	}
}

// TestServeOverlongDescriptorValueIsDecided: a call carrying [remote_address=A] and
// [user=vip+48 KiB of %=/{}:] is never an error, over gRPC and JSON, on memory and Redis:
// the first 5 calls pass, the 6th is over A's limit; nothing is counted as a store error
// or logged at ERROR.
func TestServeOverlongDescriptorValueIsDecided(t *testing.T) {
	for _, st := range pipelineStores[:2] {
		t.Run(st.name, func(t *testing.T) {
			base, rls, log := startedHard(t, st.flags(t))
			for i := range 7 {
				resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "hard",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "A"), descriptor("user", longUser)}})
				if err != nil {
					t.Fatalf("gRPC call %d: %v", i, err)
				}
				want := rlsv3.RateLimitResponse_OK
				if i >= 5 {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if resp.OverallCode != want || resp.Statuses[0].Code != want {
					t.Fatalf("gRPC call %d: %v, want %v", i, resp.OverallCode, want)
				}
			}
			body, _ := json.Marshal(map[string]any{"domain": "hard", "descriptors": []any{
				map[string]any{"entries": []any{map[string]string{"key": "remote_address", "value": "B"}}},
				map[string]any{"entries": []any{map[string]string{"key": "user", "value": longUser}}},
			}})
			for i := range 7 {
				rp, err := http.Post(base+"/v1/check", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				out, _ := io.ReadAll(rp.Body)
				rp.Body.Close()
				want := 200
				if i >= 5 {
					want = 429
				}
				if rp.StatusCode != want {
					t.Fatalf("JSON call %d: %d, want %d: %s", i, rp.StatusCode, want, out)
				}
			}
			checkNoStoreError(t, base, log)
		})
	}
}

// TestServeHitsAddendIsDecided: hits_addend is a cost the client shapes. One above what
// the rule can ever allow (1000 against 5 a minute) is a denial, never an error, and
// spends nothing: five calls of cost 1 pass after it and the sixth is over the limit. On
// memory and Redis, through the binary; a call of one limit takes the evaluator's
// one-item path (enforceOne).
func TestServeHitsAddendIsDecided(t *testing.T) {
	for _, st := range pipelineStores[:2] {
		t.Run(st.name, func(t *testing.T) {
			base, rls, log := startedHard(t, st.flags(t))
			call := func(addend uint32) rlsv3.RateLimitResponse_Code {
				resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "hard", HitsAddend: addend,
					Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "A")}})
				if err != nil {
					t.Fatalf("hits_addend %d: %v", addend, err)
				}
				return resp.OverallCode
			}
			if c := call(1000); c != rlsv3.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("hits_addend 1000 against 5 a minute: %v, want OVER_LIMIT", c)
			}
			for i := range 6 {
				want := rlsv3.RateLimitResponse_OK
				if i == 5 {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if c := call(1); c != want {
					t.Fatalf("call %d of cost 1 after the oversized one: %v, want %v", i, c, want)
				}
			}
			checkNoStoreError(t, base, log)
		})
	}
}

// TestServeRequestCaps: a call over a cap (descriptors per call, entries per descriptor,
// total bytes; defaults, the configuration's store.request_limits, and the flags) is
// refused before any work, gRPC InvalidArgument and HTTP 400, and spends nothing.
func TestServeRequestCaps(t *testing.T) {
	cfg := writeConfig(t, "hard.yaml", hardDomain)
	caps := writeConfig(t, "caps.yaml", "store:\n  request_limits: {max_entries: 2}\n")
	dir := filepath.Dir(cfg)
	os.Rename(caps, filepath.Join(dir, "caps.yaml"))
	base, grpcAddr, _ := started(t, "--config", dir, "--max-request-bytes", "4096", "--log-level", "warn")
	rls := rlsClient(t, grpcAddr)
	call := func(descs ...*ratelimitv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
		return rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "hard", Descriptors: descs})
	}
	many := make([]*ratelimitv3.RateLimitDescriptor, config.DefaultMaxDescriptors+1)
	for i := range many {
		many[i] = descriptor("remote_address", "A")
	}
	for name, descs := range map[string][]*ratelimitv3.RateLimitDescriptor{
		"257 descriptors":         many,
		"3 entries (config: 2)":   {descriptor("remote_address", "A"), descriptor("remote_address", "A", "x", "y", "z", "w")},
		"5000 bytes (flag: 4096)": {descriptor("remote_address", "A"), descriptor("user", "vip"+strings.Repeat("x", 5000))},
	} {
		if _, err := call(descs...); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: err %v, want InvalidArgument", name, err)
		}
	}
	body, _ := json.Marshal(map[string]any{"domain": "hard", "descriptors": []any{
		map[string]any{"entries": []any{map[string]string{"key": "remote_address", "value": "A"}}},
		map[string]any{"entries": []any{map[string]string{"key": "user", "value": "vip" + strings.Repeat("x", 5000)}}},
	}})
	rp, err := http.Post(base+"/v1/check", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	rp.Body.Close()
	if rp.StatusCode != 400 {
		t.Errorf("JSON over the byte cap: %d, want 400", rp.StatusCode)
	}
	// A message larger than any call within the caps is refused before it is decoded.
	huge := make([]*ratelimitv3.RateLimitDescriptor, 20000)
	for i := range huge {
		huge[i] = descriptor("remote_address", "A", "user", strings.Repeat("x", 64))
	}
	if _, err := call(huge...); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a 2 MB call: err %v, want ResourceExhausted", err)
	}
	// Nothing was spent: A has its whole limit.
	resp, err := call(descriptor("remote_address", "A"))
	if err != nil || resp.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("after the refused calls: %v %v, want 4 remaining", resp, err)
	}
}

// TestServeWriteTimeout: an answer that takes longer than --http-write-timeout (Redis
// frozen, a 2s deadline) is cut, not written.
func TestServeWriteTimeout(t *testing.T) {
	srv := redistest.Start(t)
	base, _, _ := started(t, "--redis", srv.URL(), "--deadline", "2s", "--failure-mode", "closed",
		"--http-write-timeout", "300ms", "--log-level", "error")
	check := func() (*http.Response, error) {
		return http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"policy":"demo","key":"198.51.100.9"}`))
	}
	rp, err := check()
	if err != nil {
		t.Fatalf("with Redis up: %v", err)
	}
	rp.Body.Close()
	srv.Pause()
	defer srv.Resume()
	if rp, err := check(); err == nil {
		rp.Body.Close()
		t.Fatalf("an answer written 2s after the request, past the 300ms write timeout: %d", rp.StatusCode)
	}
}

// TestProxyReadTimeout: a client that sends its body slower than --read-timeout is cut
// off instead of holding the connection (and an upstream request) open.
func TestProxyReadTimeout(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	defer up.Close()
	addr := startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--read-timeout", "300ms")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\npartial")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	io.Copy(io.Discard, conn) // until the proxy closes the connection
	// A real fault (a client that stalls) against net/http's read timeout, a runtime
	// timer no clock injects: cut at 300ms; the slack to 4s is scheduling on busy cores.
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("the connection of a stalled upload was still open after %v", d)
	}
}

// TestTimeoutDefaults: each listener has every timeout, and the defaults suit it.
func TestTimeoutDefaults(t *testing.T) {
	for name, to := range map[string]server.Timeouts{"serve": server.DefaultHTTPTimeouts, "proxy": server.DefaultProxyTimeouts} {
		hs := to.Server(nil)
		if hs.ReadHeaderTimeout <= 0 || hs.ReadTimeout <= 0 || hs.WriteTimeout <= 0 || hs.IdleTimeout <= 0 {
			t.Errorf("%s: %+v lacks a timeout", name, to)
		}
	}
	if server.DefaultProxyTimeouts.Write <= server.DefaultHTTPTimeouts.Write {
		t.Error("the proxy's write timeout must leave room for the upstream")
	}
	if defaultPprofWriteTimeout <= 30*time.Second {
		t.Error("the pprof write timeout must exceed a default 30s CPU profile")
	}
}

// TestBinaryPprofCmdlineRedacted: the built binary's /debug/pprof/cmdline, served by
// serve and by proxy with --pprof, shows the command line with the --redis password
// redacted.
func TestBinaryPprofCmdlineRedacted(t *testing.T) {
	bin := sluiceBinary(t)
	const secret = "hunter2-s3cret"
	commands := [][]string{
		{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"},
		{"proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"},
	}
	for _, command := range commands {
		for _, form := range [][]string{{"--redis", "redis://:" + secret + "@127.0.0.1:1"}, {"--redis=redis://u:" + secret + "@127.0.0.1:1"}} {
			form = append(slices.Clone(command), form...)
			pprofCmdline(t, bin, secret, form)
		}
	}
}

// pprofCmdline runs bin with form and --pprof, and checks what /debug/pprof/cmdline
// shows.
func pprofCmdline(t *testing.T, bin, secret string, form []string) {
	t.Helper()
	args := append(slices.Clone(form), "--pprof", "127.0.0.1:0", "--log-format", "json")
	cmd := exec.Command(bin, args...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := ""
	sc := bufio.NewScanner(stderr)
	for addr == "" && sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "serving pprof" {
			addr, _ = m["addr"].(string)
		}
	}
	go io.Copy(io.Discard, stderr)
	if addr == "" {
		cmd.Process.Kill()
		t.Fatal("no pprof address logged")
	}
	got := httpGet(t, "http://"+addr+"/debug/pprof/cmdline")
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if strings.Contains(got, secret) {
		t.Errorf("%v: /debug/pprof/cmdline shows the password: %q", form, got)
	}
	if !strings.Contains(got, "127.0.0.1:1") || !strings.Contains(got, "--pprof") {
		t.Errorf("%v: /debug/pprof/cmdline lost the command line: %q", form, got)
	}
}

// policyQuota returns the q of the named item of a RateLimit-Policy header.
func policyQuota(t *testing.T, h http.Header, name string) string {
	t.Helper()
	for item := range strings.SplitSeq(h.Get("RateLimit-Policy"), ",") {
		item = strings.TrimSpace(item)
		if strings.HasPrefix(item, `"`+name+`";`) {
			for p := range strings.SplitSeq(item, ";") {
				if v, ok := strings.CutPrefix(p, "q="); ok {
					return v
				}
			}
		}
	}
	t.Fatalf("no %q in RateLimit-Policy %q", name, h.Get("RateLimit-Policy"))
	return ""
}

// TestProxyClientCannotPickItsTier: through `sluice proxy`, "X-Plan: pro" from a client
// leaves it on the free tier (60/min) with the built-in configuration, with identity_tiers
// that do not name it, with a tier_header whose sender is not a trusted proxy, and with an
// X-User-ID that names a pro user from a client that is not a trusted proxy; from a trusted
// proxy the headers are believed, and identity_tiers put their identities in their tier.
func TestProxyClientCannotPickItsTier(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	tiered := func(trusted string) string {
		return writeConfig(t, "tiers.yaml", `identity:
  trusted_proxies: [`+trusted+`]
policies:
  - name: api
    key: {type: api_key, header: X-API-Key}
    tier_header: X-Plan
    default_tier: free
    tiers:
      free: {rate: 60, period: minute}
      pro: {rate: 1000, period: minute}
`)
	}
	members := `policies:
  - name: api
    key: user
    default_tier: free
    tiers:
      free: {rate: 60, period: minute}
      pro: {rate: 1000, period: minute}
    identity_tiers:
      "user:vip": pro
`
	// With the client as the trusted proxy that sets X-User-ID, and without: then
	// X-User-ID is not believed, and the client is its address.
	byIdentity := writeConfig(t, "members.yaml", "identity: {trusted_proxies: [127.0.0.1]}\n"+members)
	untrustedIdentity := writeConfig(t, "members-untrusted.yaml", members)
	for _, tc := range []struct {
		name string
		args []string
		user string
		want string
	}{
		{"built-in", nil, "", "60"},
		{"identity_tiers, another user", []string{"--config", byIdentity}, "someone", "60"},
		{"identity_tiers, the user in the tier", []string{"--config", byIdentity}, "vip", "1000"},
		{"identity_tiers, the user's header from a client", []string{"--config", untrustedIdentity}, "vip", "60"},
		{"tier header, client not a trusted proxy", []string{"--config", tiered("10.0.0.0/8")}, "", "60"},
		{"tier header from a trusted proxy", []string{"--config", tiered("127.0.0.1")}, "", "1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startedProxy(t, append([]string{"--upstream", up.URL, "--listen", "127.0.0.1:0"}, tc.args...)...)
			req, _ := http.NewRequest("GET", "http://"+addr+"/x", nil)
			req.Header.Set("X-API-Key", "k-123")
			req.Header.Set("X-User-ID", tc.user)
			req.Header.Set("X-Plan", "pro")
			rp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			rp.Body.Close()
			if q := policyQuota(t, rp.Header, "api"); q != tc.want {
				t.Errorf("api quota %s with X-Plan: pro, want %s", q, tc.want)
			}
		})
	}
}

// TestProxyClientIPHeader: through `sluice proxy`, identity.client_ip_header names the one
// header believed from a trusted proxy: two requests claiming two addresses in it are two
// clients of a 1/hour per-IP limit; in any other forwarding header they are one.
func TestProxyClientIPHeader(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	claims := map[string]func(i int) string{
		"X-Forwarded-For": func(i int) string { return fmt.Sprintf("203.0.113.%d", i+1) },
		"X-Real-IP":       func(i int) string { return fmt.Sprintf("203.0.113.%d", i+1) },
		"Forwarded":       func(i int) string { return fmt.Sprintf("for=203.0.113.%d", i+1) },
	}
	for chosen := range claims {
		t.Run(chosen, func(t *testing.T) {
			cfg := writeConfig(t, "ip.yaml", "identity:\n  trusted_proxies: [127.0.0.1]\n  client_ip_header: "+chosen+
				"\npolicies:\n  - {name: per-ip, key: ip, algorithm: gcra, rate: 1, period: hour}\n")
			addr := startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg)
			others := 0 // requests allowed that claimed an address in another header
			for sent, claim := range claims {
				allowed := 0
				for i := range 2 {
					req, _ := http.NewRequest("GET", "http://"+addr+"/"+sent, nil)
					req.Header.Set(sent, claim(i+10*len(sent))) // fresh addresses for each header
					rp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					rp.Body.Close()
					if rp.StatusCode == 200 {
						allowed++
					}
				}
				if sent != chosen {
					others += allowed
				} else if allowed != 2 {
					t.Errorf("%s claims: %d of 2 allowed, want 2 (two clients)", sent, allowed)
				}
			}
			if others > 1 {
				t.Errorf("%d requests claiming addresses in other headers allowed, want at most 1 (one client: the proxy)", others)
			}
		})
	}
}

// TestKeyCommandOverride: the identity `sluice key` prints for a raw API key (with the
// configured secret), written as an override, applies to that key through `sluice proxy`;
// a form sluice never prints is refused at load with file:line.
func TestKeyCommandOverride(t *testing.T) {
	t.Setenv("TEST_API_SECRET", "0123456789abcdef0123456789abcdef")
	base := `identity:
  api_key_secret_env: TEST_API_SECRET
policies:
  - name: api
    key: {type: api_key, header: X-API-Key}
    rate: 100
    period: hour
`
	cfg := writeConfig(t, "keys.yaml", base)
	code, out, errOut := runCmd(t, "key", "--config", cfg, "--policy", "api", "--key", "sk_live_42")
	if code != 0 {
		t.Fatalf("sluice key: exit %d: %s", code, errOut)
	}
	m := regexp.MustCompile(`(?m)^identity: (api_key:[0-9a-f]{64})$`).FindStringSubmatch(out)
	if m == nil || strings.Contains(out, "sk_live_42") {
		t.Fatalf("sluice key printed %q", out)
	}
	os.WriteFile(cfg, []byte(base+"    overrides:\n      \""+m[1]+"\": {rate: 3, period: hour}\n"), 0o644)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	addr := startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg)
	for key, want := range map[string]string{"sk_live_42": "3", "sk_other": "100"} {
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		req.Header.Set("X-API-Key", key)
		rp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rp.Body.Close()
		if q := policyQuota(t, rp.Header, "api"); q != want {
			t.Errorf("key %s: quota %s, want %s", key, q, want)
		}
	}
	os.WriteFile(cfg, []byte(base+"    overrides:\n      \"hmac:4f2a9c\": {rate: 3, period: hour}\n"), 0o644)
	if code, _, errOut := runCmd(t, "key", "--config", cfg, "--policy", "api", "--key", "k"); code == 0 || !strings.Contains(errOut, "keys.yaml:9:7: policies[0].overrides") {
		t.Errorf("an override in a form sluice never prints: exit %d: %s", code, errOut)
	}
	t.Setenv("TEST_API_SECRET", "")
	os.WriteFile(cfg, []byte(base), 0o644)
	if code, _, errOut := runCmd(t, "key", "--config", cfg, "--policy", "api", "--key", "k"); code == 0 || !strings.Contains(errOut, "TEST_API_SECRET") {
		t.Errorf("sluice key without the secret: exit %d: %s", code, errOut)
	}
}

// freeAddr returns a loopback address with a port free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestProxyShadowAndPolicyLabels: through `sluice proxy`, a shadow 1/min policy stays out
// of the client's headers (RateLimit-Policy, RateLimit, X-RateLimit-Remaining) while it
// is over its limit, and /metrics labels the decisions with each policy's name (a route
// limit's "<policy> <pattern>"), never "default".
func TestProxyShadowAndPolicyLabels(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	cfg := writeConfig(t, "shadow.yaml", `policies:
  - name: real
    key: ip
    algorithm: gcra
    rate: 100
    period: hour
    routes:
      "GET /items/{id}": {rate: 50, period: hour}
  - name: trial
    key: ip
    shadow: true
    algorithm: gcra
    rate: 1
    period: minute
`)
	admin := freeAddr(t)
	addr := startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg, "--legacy-headers",
		"--admin", admin, "--log-sampling", "1")
	for i := range 3 {
		rp, err := http.Get("http://" + addr + "/items/7")
		if err != nil {
			t.Fatal(err)
		}
		rp.Body.Close()
		if rp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, rp.StatusCode)
		}
		for _, h := range []string{"RateLimit-Policy", "RateLimit"} {
			if strings.Contains(rp.Header.Get(h), "trial") {
				t.Errorf("request %d: %s advertises the shadow policy: %q", i, h, rp.Header.Get(h))
			}
		}
		if r := rp.Header.Get("X-RateLimit-Remaining"); r == "0" || r == "" {
			t.Errorf("request %d: X-RateLimit-Remaining %q, want the enforced policies' remaining", i, r)
		}
	}
	var body string
	poll.Until(t, 10*time.Second, "the admin listener answering", func() bool {
		rp, err := http.Get("http://" + admin + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(rp.Body)
		rp.Body.Close()
		body = string(b)
		return true
	})
	for _, want := range []string{
		`sluice_decisions_total{path="store",policy="real",result="allowed"} 3`,
		`sluice_decisions_total{path="store",policy="real GET /items/{id}",result="allowed"} 3`,
		`sluice_decisions_total{path="store",policy="trial",result="allowed"} 1`,
		`policy="trial",result="denied"}`, // by the store, then by the deny cache
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(body, "sluice_decisions_total"))
		}
	}
	if strings.Contains(body, `policy="default"`) {
		t.Errorf("/metrics labels decisions policy=\"default\":\n%s", grepLines(body, "policy=\"default\""))
	}
}

// TestServeShadowOutOfHeaders: a shadow_mode descriptor over its limit stays out of
// Envoy's response_headers_to_add (the IETF fields, asked for) and of the JSON API's
// headers.
func TestServeShadowOutOfHeaders(t *testing.T) {
	cfg := writeConfig(t, "edge.yaml", `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {algorithm: gcra, unit: hour, requests_per_unit: 100, name: real}
  - key: trial
    shadow_mode: true
    rate_limit: {algorithm: gcra, unit: minute, requests_per_unit: 1, name: trial}
`)
	base, grpcAddr, _ := started(t, "--config", cfg, "--log-level", "warn", "--rls-ietf-headers")
	rls := rlsClient(t, grpcAddr)
	for i := range 3 {
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "A"), descriptor("trial", "A")}})
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call %d: %v %v", i, resp, err)
		}
		if len(resp.ResponseHeadersToAdd) == 0 {
			t.Fatalf("call %d: no headers with --rls-ietf-headers", i)
		}
		for _, h := range resp.ResponseHeadersToAdd {
			if strings.Contains(h.Value, "trial") {
				t.Errorf("call %d: %s advertises the shadow rule: %q", i, h.Key, h.Value)
			}
		}
	}
	body := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"B"}]},{"entries":[{"key":"trial","value":"B"}]}]}`
	for i := range 3 {
		rp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		rp.Body.Close()
		if rp.StatusCode != 200 || strings.Contains(rp.Header.Get("RateLimit-Policy")+rp.Header.Get("RateLimit"), "trial") {
			t.Errorf("JSON call %d: %d, headers %v", i, rp.StatusCode, rp.Header)
		}
	}
}

// TestServeIdentityTiers: the JSON API resolves identity_tiers as the proxy does: the
// identity's tier wins over the tier the caller names.
func TestServeIdentityTiers(t *testing.T) {
	cfg := writeConfig(t, "members.yaml", `policies:
  - name: api
    key: user
    default_tier: free
    tiers:
      free: {rate: 60, period: minute}
      pro: {rate: 1000, period: minute}
    identity_tiers:
      "user:vip": pro
`)
	base, _, _ := started(t, "--config", cfg, "--log-level", "warn")
	for key, want := range map[string]string{"vip": "tier:pro 1000", "someone": "tier:free 60"} {
		rp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"policy":"api","key":"`+key+`","tier":"free"}`))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Limits []struct {
				Source string `json:"source"`
				Rate   int64  `json:"rate"`
			} `json:"limits"`
		}
		json.NewDecoder(rp.Body).Decode(&out)
		rp.Body.Close()
		if len(out.Limits) != 1 || fmt.Sprintf("%s %d", out.Limits[0].Source, out.Limits[0].Rate) != want {
			t.Errorf("user %s: %+v, want %s", key, out.Limits, want)
		}
	}
}
