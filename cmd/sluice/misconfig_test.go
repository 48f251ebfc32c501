package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testcert"
)

// TestServeRedisMisconfigured: a Redis URL that Redis refuses for its settings, which no
// retry can fix, stops serve and proxy at start with exit code 1 and a message naming the
// cause. Before, they retried it as an outage forever and, failing open, allowed every
// request silently (issue 39, item 7).
func TestServeRedisMisconfigured(t *testing.T) {
	bin := sluiceBinary(t)
	plain := redistest.Start(t)
	other := redistest.Start(t)
	pw := redistest.Start(t, redistest.WithConfig("requirepass", "s3cret"))
	acl := redistest.Start(t,
		redistest.WithConfig("user", "default", "off"),
		redistest.WithConfig("user", "limiter", "on", ">s3cret", "~sluice:*", "+@all"))
	sentinel := redistest.StartSentinel(t, plain, "limits")
	tlsPort := startTLSRedis(t)

	for _, c := range []struct {
		name, url, cause string
		proxy            bool
	}{
		{"database out of range", plain.URL() + "/99", "database", false},
		{"database out of range, proxy", plain.URL() + "/99", "database", true},
		{"wrong password", "redis://:wrong@" + pw.Addr(), "auth", false},
		{"no password", pw.URL(), "auth", false},
		{"ACL user, wrong password", "redis://limiter:wrong@" + acl.Addr(), "auth", false},
		{"ACL default user off", acl.URL(), "auth", false},
		{"certificate not verified", "rediss://127.0.0.1:" + tlsPort, "tls", false},
		{"cluster URL, standalone servers", plain.URL() + "?addr=" + other.Addr(), "cluster", false},
		{"Sentinel URL, not a Sentinel", plain.URL() + "?master_set=limits", "sentinel", false},
		{"Sentinel URL, master not monitored", "redis://" + sentinel.Addr() + "?master_set=other", "sentinel", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0"}
			if c.proxy {
				args = []string{"proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--admin", "127.0.0.1:0"}
			}
			code, out := runUntilServing(t, bin, append(args, "--redis", c.url, "--log-format", "json")...)
			if code != 1 {
				t.Fatalf("exit code %d, want 1 (a start-up failure); output:\n%.3000s", code, out)
			}
			for _, want := range []string{"retrying cannot fix it", "(" + c.cause + ": "} {
				if !strings.Contains(out, want) {
					t.Errorf("the output lacks %q:\n%.3000s", want, out)
				}
			}
			if strings.Contains(out, "s3cret") {
				t.Errorf("the output quotes the password:\n%s", out)
			}
		})
	}
}

// runUntilServing runs bin with args until it exits or logs that it serves (then it is
// killed), and returns its exit code (-1 when it was serving) and its output.
func runUntilServing(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var out strings.Builder
	serving := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), `"msg":"serving`) || strings.Contains(sc.Text(), `"msg":"proxying`) {
				once.Do(func() { close(serving) })
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { <-read; exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		mu.Lock()
		defer mu.Unlock()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	case <-serving:
	case <-time.After(30 * time.Second):
	}
	cmd.Process.Kill()
	<-exited
	mu.Lock()
	defer mu.Unlock()
	return -1, out.String()
}

// startTLSRedis starts a redis-server that speaks TLS on the returned port with a
// certificate of a private CA, which the system's roots do not verify.
func startTLSRedis(t *testing.T) string {
	t.Helper()
	ca := testcert.NewCA(t, "private CA")
	cert, key := ca.Server(t, "redis")
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	redistest.Start(t,
		redistest.WithConfig("tls-port", port),
		redistest.WithConfig("tls-cert-file", testcert.WriteFile(t, dir, "cert.pem", cert)),
		redistest.WithConfig("tls-key-file", testcert.WriteFile(t, dir, "key.pem", key)),
		redistest.WithConfig("tls-ca-cert-file", testcert.WriteFile(t, dir, "ca.pem", ca.PEM)),
		redistest.WithConfig("tls-auth-clients", "no"))
	return port
}

// TestServeRedisMisconfiguredWhileRunning: serve started while its Redis was down keeps
// running and retrying; when Redis comes back refusing the URL's settings (it now asks for
// a password the URL lacks), serve reports it as what it is: /readyz names the
// misconfiguration and its cause, sluice_store_misconfigured{cause="auth"} is 1, and the
// log holds one record of it however many decisions fail meanwhile. Once the operator
// fixes it, serve decides on Redis and both clear.
func TestServeRedisMisconfiguredWhileRunning(t *testing.T) {
	bin := sluiceBinary(t)
	srv := redistest.Start(t, redistest.WithConfig("requirepass", "s3cret"))
	srv.Kill()
	p := startServe(t, bin, "--redis", srv.URL(), "--deadline", "50ms")
	srv.Restart()
	ready := func() (int, string) {
		rp, err := http.Get(p.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer rp.Body.Close()
		var b strings.Builder
		bufio.NewReader(rp.Body).WriteTo(&b)
		return rp.StatusCode, b.String()
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		poll.UntilDescribed(t, 20*time.Second, what, ok, func() string {
			code, body := ready()
			return fmt.Sprintf("/readyz %d %s", code, body)
		})
	}
	waitFor("/readyz names the misconfiguration", func() bool {
		code, body := ready()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "misconfigured") && strings.Contains(body, "(auth: ")
	})
	if v := metricValue(t, p.base, `sluice_store_misconfigured{cause="auth"}`); v != 1 {
		t.Errorf(`sluice_store_misconfigured{cause="auth"} %v, want 1`, v)
	}
	if v := metricValue(t, p.base, `sluice_store_misconfigured`); v != 1 {
		t.Errorf("sluice_store_misconfigured sums to %v over its causes, want 1", v)
	}
	// Decisions fail as misconfigured (the failure mode answers them) and are counted so.
	for range 30 {
		if code, _ := postJSON(t, p.base+"/v1/check", `{"policy":"demo","key":"203.0.113.9"}`); code != http.StatusOK {
			t.Fatalf("/v1/check %d, want the failure mode's 200", code)
		}
	}
	if v := metricValue(t, p.base, `sluice_store_errors_total{kind="misconfigured"}`); v < 30 {
		t.Errorf(`sluice_store_errors_total{kind="misconfigured"} %v after 30 decisions`, v)
	}
	p.mu.Lock()
	var refuses, failures int
	for _, m := range p.logs {
		if m["msg"] == "redisstore: Redis refuses the store's settings; decisions fail until the settings are fixed, still retrying" {
			refuses++
		}
		if m["error_kind"] == "misconfigured" {
			failures++
		}
	}
	p.mu.Unlock()
	if refuses != 1 {
		t.Errorf("%d log records of the misconfiguration, want 1 in its first minute", refuses)
	}
	if failures > 2 {
		t.Errorf("%d log records of the 30 decisions that failed, want at most a record and a summary", failures)
	}

	if _, err := srv.CLI("-a", "s3cret", "--no-auth-warning", "CONFIG", "SET", "requirepass", ""); err != nil {
		t.Fatal(err)
	}
	waitFor("/readyz ready once fixed", func() bool { code, _ := ready(); return code == http.StatusOK })
	if v := metricValue(t, p.base, `sluice_store_misconfigured`); v != 0 {
		t.Errorf("sluice_store_misconfigured %v once fixed, want 0", v)
	}
}
