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
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binDir    string // holds the binary sluiceBinary built
	binErr    error
)

// sluiceBinary builds the sluice binary from this package, once per test run, as
// deploy/Dockerfile builds the image's (CGO_ENABLED=0, -trimpath), and returns its path:
// the tests start the binary that ships, and its build shares every compiled package
// with TestImageBinary's and with make test's go vet, which use the same settings.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "sluice-bin"); binErr != nil {
			return
		}
		b, err := dockerfileBuild(filepath.Join("..", "..", "deploy", "Dockerfile"), "v0.0.0-test")
		if err != nil {
			binErr = err
			return
		}
		build := b.command(filepath.Join(binDir, "sluice"))
		if out, err := build.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("%s: %v\n%s", strings.Join(build.Args, " "), err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "sluice")
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger and reads of a
// test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runCmd runs the command line in-process and returns its exit code and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb syncBuffer
	code := run(context.Background(), append([]string{"sluice"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpAndVersion(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"serve", "proxy", "check", "key", "simulate", "version"}},
		{[]string{"serve", "--help"}, []string{"--http", "$SLUICE_HTTP_ADDR", "--grpc", "$SLUICE_GRPC_ADDR", "--config", "$SLUICE_CONFIG",
			"--redis", "$SLUICE_REDIS_URL", "--failure-mode", "$SLUICE_FAILURE_MODE", "--shadow-mode", "--admin-token-file",
			"--tls-cert", "$SLUICE_TLS_CERT", "--tls-key", "--tls-client-ca",
			"--deny-cache-bytes", "$SLUICE_DENY_CACHE_BYTES", "--deny-cache-max-age", "$SLUICE_DENY_CACHE_MAX_AGE"}},
		{[]string{"proxy", "--help"}, []string{"--upstream", "$SLUICE_UPSTREAM", "--listen", "$SLUICE_PROXY_ADDR", "--config", "--tls-cert", "--deny-cache-bytes"}},
		{[]string{"check", "--help"}, []string{"--server", "$SLUICE_SERVER", "--policy", "--descriptor", "--peek", "--tls-ca", "$SLUICE_CHECK_TLS_CA", "--health", "--ready"}},
		{[]string{"simulate", "--help"}, []string{"--pattern", "$SLUICE_SIMULATE_PATTERN", "--algorithms", "$SLUICE_SIMULATE_ALGORITHMS", "--format", "--out", "$SLUICE_SIMULATE_OUT", "--seed", "--scale", "--redis", "$SLUICE_SIMULATE_REDIS_URL", "cdn-batch"}},
		{[]string{"version"}, []string{"sluice ", "go1."}},
	} {
		code, out, errOut := runCmd(t, tc.args...)
		if code != 0 {
			t.Errorf("%v: exit %d, stderr %s", tc.args, code, errOut)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out+errOut, w) {
				t.Errorf("%v: output lacks %q:\n%s%s", tc.args, w, out, errOut)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--failure-mode", "sideways", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"},
		{"serve", "--http", "", "--grpc", ""},
		{"serve", "--log-level", "loud"},
		{"serve", "--deny-cache-bytes", "-1", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"},
		{"serve", "--deny-cache-max-age", "0s", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"},
		{"serve", "--redis-min-ttl", "-1s", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"},
		{"proxy", "--upstream", "not a url"},
		{"check"},
		{"check", "--domain", "d", "--descriptor", "novalue"},
		{"check", "--health", "--ready"},
	} {
		if code, _, errOut := runCmd(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (usage); stderr %s", args, code, exitUsage, errOut)
		}
	}
	code, _, errOut := runCmd(t, "serve", "--config", "/nonexistent/sluice.yaml")
	if code != exitError || !strings.Contains(errOut, "nonexistent") {
		t.Errorf("missing config: exit %d, stderr %s", code, errOut)
	}
}

// atVirtualTime makes the serve or proxy the test starts next decide on a clock stopped at
// at, instead of the wall clock, until the test ends.
func atVirtualTime(t *testing.T, at time.Time) {
	t.Helper()
	clockHook = clocktest.New(at).Now
	t.Cleanup(func() { clockHook = nil })
}

// started runs `sluice serve args...` in-process until the test ends and returns its
// HTTP base URL, gRPC address and log.
func started(t *testing.T, args ...string) (string, string, *syncBuffer) {
	t.Helper()
	addrs := make(chan [2]string, 1)
	listenHook = func(h, g string) { addrs <- [2]string{h, g} }
	t.Cleanup(func() { listenHook = nil })
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"sluice", "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}, args...), &out, &errb)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d: %s", code, errb.String())
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop within 30s")
		}
		if strings.Contains(errb.String(), "sluice starting") && !strings.Contains(errb.String(), "store closed") {
			t.Errorf("the store was not closed at shutdown:\n%s", errb.String())
		}
	})
	select {
	case a := <-addrs:
		return "http://" + a[0], a[1], &errb
	case code := <-done:
		t.Fatalf("serve exited %d: %s", code, errb.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not listen within 30s: %s", errb.String())
	}
	return "", "", nil
}

func rlsClient(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestServeBuiltIn: with no flags but addresses, serve runs the built-in example on the
// in-memory store, and `sluice check` talks to it.
func TestServeBuiltIn(t *testing.T) {
	atVirtualTime(t, clocktest.MidHour)
	base, grpcAddr, _ := started(t)
	// The built-in demo policy: 10/s per IP with bursts of 20. On serve's stopped clock
	// the bucket does not refill: the first 20 pass and the 21st is denied.
	for i := range 20 {
		code, out, errOut := runCmd(t, "check", "--server", base, "--policy", "demo", "--key", "198.51.100.1")
		if code != exitOK {
			t.Fatalf("check %d: exit %d: %s %s", i, code, out, errOut)
		}
	}
	if code, out, _ := runCmd(t, "check", "--server", base, "--policy", "demo", "--key", "198.51.100.1"); code != exitDenied || !strings.Contains(out, `"allowed": false`) {
		t.Fatalf("check after the burst of 20: exit %d, want %d (denied): %s", code, exitDenied, out)
	}
	code, out, _ := runCmd(t, "check", "--server", base, "--peek", "--policy", "demo", "--key", "198.51.100.2")
	if code != exitOK || !strings.Contains(out, `"remaining": 20`) {
		t.Fatalf("peek: exit %d: %s", code, out)
	}
	code, out, _ = runCmd(t, "check", "--server", base, "--domain", "demo", "--descriptor", "path=/healthz")
	if code != exitOK || !strings.Contains(out, `"unlimited"`) {
		t.Fatalf("domain check: exit %d: %s", code, out)
	}
	if code, _, _ := runCmd(t, "check", "--server", base, "--policy", "nope", "--key", "x"); code != exitError {
		t.Fatalf("unknown policy: exit %d, want %d", code, exitError)
	}
	// The built-in Envoy domain "demo" over gRPC.
	resp, err := rlsClient(t, grpcAddr).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: "demo", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "198.51.100.1")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 100 || resp.Statuses[0].LimitRemaining != 99 {
		t.Fatalf("ShouldRateLimit: %v", resp)
	}
}

// TestServeRedisFailureModes: serve on Redis (named by the environment variable) answers
// within its deadline while Redis is frozen (SIGSTOP), as --failure-mode says: open
// allows, closed denies (Envoy OVER_LIMIT, HTTP 503).
func TestServeRedisFailureModes(t *testing.T) {
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			t.Setenv("SLUICE_REDIS_URL", srv.URL())
			base, grpcAddr, log := started(t, "--failure-mode", mode, "--deadline", "50ms", "--log-level", "warn")
			rls := rlsClient(t, grpcAddr)
			// With Redis up the store decides (the first calls may be slow on a busy
			// machine: connecting, loading the script).
			i := 0
			poll.Until(t, 10*time.Second, "the store deciding with Redis up", func() bool {
				req := &rlsv3.RateLimitRequest{Domain: "demo", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", fmt.Sprint("198.51.100.", i))}}
				i++
				resp, err := rls.ShouldRateLimit(context.Background(), req)
				return err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK && resp.Statuses[0].LimitRemaining == 99
			})
			req := &rlsv3.RateLimitRequest{Domain: "demo", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "198.51.100.200")}}
			srv.Pause()
			defer srv.Resume()
			var worst time.Duration
			for range 20 {
				start := time.Now()
				resp, err := rls.ShouldRateLimit(context.Background(), req)
				worst = max(worst, time.Since(start))
				if err != nil {
					t.Fatalf("frozen Redis: %v", err)
				}
				want := rlsv3.RateLimitResponse_OK
				if mode == "closed" {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if resp.OverallCode != want {
					t.Fatalf("frozen Redis, %s: %v", mode, resp)
				}
			}
			// A real fault (SIGSTOP): the answers come at the 50ms deadline; 1s of slack
			// is scheduling on two busy cores.
			if worst > time.Second {
				t.Fatalf("slowest answer with Redis frozen: %v", worst)
			}
			rp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"policy":"demo","key":"198.51.100.9"}`))
			if err != nil {
				t.Fatal(err)
			}
			rp.Body.Close()
			wantStatus := map[string]int{"open": 200, "closed": 503}[mode]
			if rp.StatusCode != wantStatus {
				t.Fatalf("/v1/check with Redis frozen, %s: %d, want %d", mode, rp.StatusCode, wantStatus)
			}
			srv.Resume()
			if strings.Contains(log.String(), srv.URL()) && strings.Contains(srv.URL(), "@") {
				t.Fatal("the Redis URL with its password was logged")
			}
			t.Logf("%s: slowest answer while Redis was frozen: %v", mode, worst)
		})
	}
}

// TestRedisMinTTL: --redis-min-ttl keeps a key in Redis at least that long, where without
// it the key lives until its state is empty (the end of a one-second or one-hour window),
// in serve and in proxy. Two spends in one window: the second keeps the key's TTL
// (redisstore's KEEPTTL write) unless the minimum raises it, and either way the key has
// one.
func TestRedisMinTTL(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	proxyCfg := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(proxyCfg, []byte("policies:\n  - {name: per-ip, key: ip, algorithm: gcra, rate: 2, period: hour}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// decide makes two allowed decisions on one key through cmd on redisURL with args.
	decide := map[string]func(t *testing.T, redisURL string, args []string){
		"serve": func(t *testing.T, redisURL string, args []string) {
			_, grpcAddr, _ := started(t, append([]string{"--redis", redisURL, "--deadline", "5s"}, args...)...)
			rls := rlsClient(t, grpcAddr)
			req := &rlsv3.RateLimitRequest{Domain: "demo", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "198.51.100.7")}}
			for _, want := range []uint32{99, 98} {
				resp, err := rls.ShouldRateLimit(context.Background(), req)
				// 98 may read 99 again when the second call starts the next one-second window.
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != want && resp.Statuses[0].LimitRemaining != 99 {
					t.Fatalf("decision: %v %v", resp, err)
				}
			}
		},
		"proxy": func(t *testing.T, redisURL string, args []string) {
			base := "http://" + startedProxy(t, append([]string{"--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", proxyCfg, "--redis", redisURL, "--deadline", "5s"}, args...)...)
			for range 2 {
				rp, err := http.Get(base + "/x")
				if err != nil {
					t.Fatal(err)
				}
				rp.Body.Close()
				if rp.StatusCode != 200 || rp.Header.Get("RateLimit") == "" {
					t.Fatalf("decision: %d %v", rp.StatusCode, rp.Header)
				}
			}
		},
	}
	for _, cmd := range []string{"serve", "proxy"} {
		for _, c := range []struct {
			args           []string
			lowest, higher time.Duration // every key's PTTL is in [lowest, higher]
		}{
			{nil, 1, map[string]time.Duration{"serve": time.Second, "proxy": time.Hour}[cmd]},
			{[]string{"--redis-min-ttl", "2h"}, 2*time.Hour - 10*time.Second, 2 * time.Hour},
		} {
			t.Run(fmt.Sprint(cmd, c.args), func(t *testing.T) {
				srv := redistest.Start(t)
				decide[cmd](t, srv.URL(), c.args)
				keys := strings.Fields(srv.MustDo("KEYS", "*"))
				if len(keys) == 0 {
					t.Fatal("the decision wrote no key")
				}
				for _, k := range keys {
					ms, err := strconv.ParseInt(srv.MustDo("PTTL", k), 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					if ttl := time.Duration(ms) * time.Millisecond; ttl < c.lowest || ttl > c.higher {
						t.Errorf("key %q: TTL %v, want within [%v, %v]", k, ttl, c.lowest, c.higher)
					}
				}
			})
		}
	}
}

// TestProxyCommand: `sluice proxy` in front of a test upstream limits, sends the headers
// and answers 429 with a problem body.
func TestProxyCommand(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	cfg := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(cfg, []byte("policies:\n  - {name: per-ip, key: ip, algorithm: gcra, rate: 2, period: hour}\n"), 0o644)
	base := "http://" + startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg)
	for i, want := range []int{200, 200, 429} {
		rp, err := http.Get(base + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(rp.Body)
		rp.Body.Close()
		if rp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i, rp.StatusCode, want)
		}
		if rp.Header.Get("RateLimit-Policy") != `"per-ip";q=2;w=3600` {
			t.Fatalf("request %d: RateLimit-Policy %q", i, rp.Header.Get("RateLimit-Policy"))
		}
		if want == 200 && string(body) != "upstream" {
			t.Fatalf("request %d: body %q", i, body)
		}
		if want == 429 {
			var p struct {
				Type     string   `json:"type"`
				Violated []string `json:"violated-policies"`
			}
			if json.Unmarshal(body, &p); rp.Header.Get("Content-Type") != "application/problem+json" || len(p.Violated) != 1 {
				t.Fatalf("429: %s %q", rp.Header.Get("Content-Type"), body)
			}
		}
	}
}

// startedProxy runs `sluice proxy args...` in-process until the test ends, when it must
// exit 0, and returns the address it listens on.
func startedProxy(t *testing.T, args ...string) string {
	t.Helper()
	addrs := make(chan net.Addr, 1)
	proxyListenHook = func(a net.Addr) { addrs <- a }
	t.Cleanup(func() { proxyListenHook = nil })
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"sluice", "proxy"}, args...), io.Discard, &errb) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("proxy exited %d: %s", code, errb.String())
		}
	})
	select {
	case a := <-addrs:
		return a.String()
	case code := <-done:
		done <- code // for the cleanup
		t.Fatalf("proxy exited %d: %s", code, errb.String())
	}
	return ""
}

// TestBinarySignals builds the sluice binary and runs it as an operator would: it reloads
// on SIGHUP, keeps the old configuration when the new one is invalid, and on SIGTERM
// finishes and exits 0.
func TestBinarySignals(t *testing.T) {
	bin := sluiceBinary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "edge.yaml")
	write := func(rpu int) {
		os.WriteFile(cfgPath, fmt.Appendf(nil, "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {algorithm: gcra, unit: hour, requests_per_unit: %d}\n", rpu), 0o644)
	}
	write(7)
	cmd := exec.Command(bin, "serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--config", dir, "--log-format", "json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	waitLog := func(msg string) map[string]any {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("sluice exited before logging %q", msg)
				}
				if m["msg"] == msg {
					return m
				}
			case <-timeout:
				t.Fatalf("no %q log line within 20s", msg)
			}
		}
	}
	grpcAddr := waitLog("serving gRPC")["addr"].(string)
	rls := rlsClient(t, grpcAddr)
	limit := func() uint32 {
		t.Helper()
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if l := limit(); l != 7 {
		t.Fatalf("limit %d, want 7", l)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog("SIGHUP: reloading the configuration")
	os.WriteFile(cfgPath, []byte("domain: edge\ndescriptors: [{key: k, rate_limit: {unit: eon, requests_per_unit: 1}}]\n"), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	waitLog("SIGHUP: reloading the configuration")
	waitLog("config: reload rejected; the previous configuration stays in force")
	if l := limit(); l != 7 {
		t.Fatalf("an invalid configuration took effect: limit %d", l)
	}
	write(9)
	cmd.Process.Signal(syscall.SIGHUP)
	poll.Until(t, 10*time.Second, "the valid configuration in force after SIGHUP", func() bool { return limit() == 9 })
	cmd.Process.Signal(syscall.SIGTERM)
	waitLog("store closed")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("sluice exited with %v after SIGTERM", err)
	}
}

// TestCheckSendsDescriptorsAsWritten: a --descriptor with several entries is one
// descriptor with those entries in order (a nested Envoy descriptor), each --descriptor is
// one descriptor, and the environment variable separates descriptors with ';'.
func TestCheckSendsDescriptorsAsWritten(t *testing.T) {
	var got []server.CheckRequest
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req server.CheckRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("request body: %v", err)
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		json.NewEncoder(w).Encode(server.CheckResponse{Allowed: true, Limits: []server.LimitStatus{{Status: "limited"}}})
	}))
	defer srv.Close()
	want := [][]server.Descriptor{
		{{Entries: []server.Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "555"}}}, {Entries: []server.Entry{{Key: "user", Value: "u1"}}}},
		{{Entries: []server.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}}}, {Entries: []server.Entry{{Key: "c", Value: "3"}}}},
	}
	if code, out, errOut := runCmd(t, "check", "--server", srv.URL, "--domain", "edge",
		"--descriptor", "message_type=marketing,to_number=555", "--descriptor", "user=u1"); code != exitOK {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	t.Setenv("SLUICE_CHECK_DESCRIPTORS", "a=1,b=2;c=3")
	if code, out, errOut := runCmd(t, "check", "--server", srv.URL, "--domain", "edge"); code != exitOK {
		t.Fatalf("from the environment: exit %d: %s %s", code, out, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("%d requests, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i].Descriptors, want[i]) {
			t.Errorf("request %d: descriptors %+v, want %+v", i, got[i].Descriptors, want[i])
		}
	}
}

// TestSimulateFlags: simulate takes double-dash flags and their environment variables,
// the command line winning, and answers a bad value with the usage exit status.
func TestSimulateFlags(t *testing.T) {
	t.Setenv("SLUICE_SIMULATE_FORMAT", "json")
	t.Setenv("SLUICE_SIMULATE_ALGORITHMS", "gcra")
	args := []string{"simulate", "--pattern", "steady-1x", "--scale", "0.1"}
	code, out, errOut := runCmd(t, args...)
	if code != exitOK || !strings.HasPrefix(strings.TrimSpace(out), "[") || strings.Contains(out, "sliding_log") {
		t.Fatalf("with SLUICE_SIMULATE_FORMAT=json and SLUICE_SIMULATE_ALGORITHMS=gcra: exit %d, stderr %s, output %.200s", code, errOut, out)
	}
	code, out, errOut = runCmd(t, append(args, "--format", "csv")...)
	if code != exitOK || strings.HasPrefix(strings.TrimSpace(out), "[") || !strings.Contains(out, "steady-1x,gcra") {
		t.Fatalf("--format csv over the variable: exit %d, stderr %s, output %.200s", code, errOut, out)
	}
	for _, bad := range [][]string{{"--seed", "minus-one"}, {"--scale", "0"}, {"stray"}} {
		if code, _, errOut := runCmd(t, append(args, bad...)...); code != exitUsage {
			t.Errorf("simulate %v: exit %d, want %d; stderr %s", bad, code, exitUsage, errOut)
		}
	}
}

// TestSimulateOverload: `simulate overload` takes its own double-dash flags and their
// environment variables, the command line winning; simulate's pattern flags are not its
// own; a bad value is a usage error; and simulate without a subcommand still runs the
// patterns.
func TestSimulateOverload(t *testing.T) {
	t.Setenv("SLUICE_SIMULATE_OVERLOAD_FORMAT", "json")
	args := []string{"simulate", "overload", "--steps", "1,4", "--step", "1s", "--slow", "2s", "--protections", "sluice"}
	code, out, errOut := runCmd(t, args...)
	if code != exitOK || !strings.HasPrefix(strings.TrimSpace(out), "{") || !strings.Contains(out, `"protection": "sluice"`) || strings.Contains(out, `"protection": "none"`) {
		t.Fatalf("with SLUICE_SIMULATE_OVERLOAD_FORMAT=json: exit %d, stderr %s, output %.300s", code, errOut, out)
	}
	code, out, errOut = runCmd(t, append(args, "--format", "csv", "--critical-max", "0.5")...)
	if code != exitOK || !strings.HasPrefix(out, "protection,phase,") || !strings.Contains(out, "\nsluice,4× slow,4,true,") {
		t.Fatalf("--format csv over the variable: exit %d, stderr %s, output %.300s", code, errOut, out)
	}
	limiter := []string{"--window", "250ms", "--min-samples", "20", "--long-window", "100", "--tolerance", "30", "--headroom", "2",
		"--remeasure", "30s", "--critical-reserve", "30", "--default-reserve", "10", "--max-wait", "300ms", "--max-queue", "50",
		"--settle", "1s", "--swing", "0.25", "--format", "table"}
	code, out, errOut = runCmd(t, append(args, limiter...)...)
	setup := "sluice: Window:250ms MinSamples:20 LongWindow:100 Tolerance:30 Headroom:2 Remeasure:30s CriticalReserve:30 DefaultReserve:10 MaxWait:300ms MaxQueue:50 ·"
	if code != exitOK || !strings.Contains(out, setup) || !strings.Contains(out, "the limit settles within 1s and then swings ≤ ±25%") {
		t.Fatalf("the limiter's and the target's flags: exit %d, stderr %s, output %s", code, errOut, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--pattern", "boundary"}, "sluice simulate overload: unknown flag --pattern"},
		{[]string{"--steps", "1,x"}, `sluice simulate overload: --steps: "x" is not a load`},
		{[]string{"--protections", "failsafe"}, `unknown protection "failsafe"`},
		{[]string{"--workers", "many"}, `sluice simulate overload: --workers: "many" is not valid`},
		{[]string{"stray"}, `sluice simulate overload: takes no arguments, got "stray"`},
	} {
		code, _, errOut := runCmd(t, append(args, tc.args...)...)
		if code != exitUsage || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("simulate overload %v: exit %d, stderr %q; want %d and one line holding %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
	if code, _, errOut := runCmd(t, "simulate", "overlaod"); code != exitUsage || !strings.Contains(errOut, "sluice simulate: unknown command overlaod; did you mean overload?") {
		t.Errorf("simulate overlaod: exit %d, stderr %q", code, errOut)
	}
	t.Setenv("SLUICE_SIMULATE_FORMAT", "csv")
	if code, out, errOut := runCmd(t, "simulate", "--pattern", "steady-1x", "--scale", "0.1", "--algorithms", "gcra"); code != exitOK || !strings.Contains(out, "steady-1x,gcra") {
		t.Errorf("simulate beside its subcommand: exit %d, stderr %s, output %.200s", code, errOut, out)
	}
}
