package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/server"
)

// serveProcess is one process of a built binary, `sluice serve` or `sluice proxy`.
type serveProcess struct {
	cmd  *exec.Cmd
	base string // http://addr: serve's HTTP API, proxy's admin listener
	mu   sync.Mutex
	logs []map[string]any
}

// startServe runs bin serve with args and waits until it serves HTTP.
func startServe(t *testing.T, bin string, args ...string) *serveProcess {
	t.Helper()
	return startBinary(t, bin, append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log-format", "json"}, args...)...)
}

// startBinary runs bin with args (which make it log JSON and serve HTTP) and waits until
// it logs "serving HTTP". Its environment is the test's, with an admin token.
func startBinary(t *testing.T, bin string, args ...string) *serveProcess {
	t.Helper()
	p := &serveProcess{cmd: exec.Command(bin, args...)}
	p.cmd.Env = append(os.Environ(), "SLUICE_ADMIN_TOKEN=override-test-token-0123456789")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			p.mu.Lock()
			p.logs = append(p.logs, m)
			p.mu.Unlock()
			if m["msg"] == "serving HTTP" {
				addr <- m["addr"].(string)
			}
		}
	}()
	select {
	case a := <-addr:
		p.base = "http://" + a
	case <-time.After(20 * time.Second):
		t.Fatalf("sluice %s did not serve HTTP within 20s", args[0])
	}
	return p
}

// stop ends the process with SIGTERM and waits for it.
func (p *serveProcess) stop(t *testing.T) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("sluice serve exited with %v after SIGTERM", err)
	}
}

func (p *serveProcess) logged(msg string) map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.logs {
		if m["msg"] == msg {
			return m
		}
	}
	return nil
}

// source is the source and rate of the limit of policy orgs for key on p, nothing spent.
func (p *serveProcess) source(t *testing.T, key string) (string, int64) {
	t.Helper()
	resp, err := http.Post(p.base+"/v1/peek", "application/json", strings.NewReader(`{"policy":"orgs","key":"`+key+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cr server.CheckResponse
	if err := json.NewDecoder(resp.Body).Decode(&cr); err != nil || len(cr.Limits) != 1 {
		t.Fatalf("peek: %v %+v", err, cr)
	}
	return cr.Limits[0].Source, cr.Limits[0].Rate
}

// waitSource waits up to within for p to report source for key, and returns how long it
// took.
func (p *serveProcess) waitSource(t *testing.T, key, source string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var got string
	poll.UntilDescribed(t, within, p.base+": source "+source, func() bool {
		got, _ = p.source(t, key)
		return got == source
	}, func() string { return "source " + got })
	return time.Since(start)
}

// TestOverridesAcrossServeProcesses: two `sluice serve` processes of the built binary on
// one real Redis. An override set through one (with `sluice override set`) applies on the
// other within one second; both restart and it is still there; an override with
// expires_in 2s is gone after it, on both. The processes run on their own clocks, which
// no test sets (the shipped binary is what is tested): a change applies within
// server.DefaultOverrideRefresh (500ms), and the second is that plus scheduling slack;
// the expiry is checked with a lower bound, which load cannot break.
func TestOverridesAcrossServeProcesses(t *testing.T) {
	bin := sluiceBinary(t)
	srv := redistest.Start(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "policies.yaml"), []byte("policies:\n  - name: orgs\n    key: {type: user, header: X-User}\n    rate: 5\n    period: 1m\n"), 0o644)
	args := []string{"--config", dir, "--redis", srv.URL()}
	a, b := startServe(t, bin, args...), startServe(t, bin, args...)
	t.Setenv("SLUICE_ADMIN_TOKEN", "override-test-token-0123456789")
	cli := func(args ...string) string {
		t.Helper()
		var out, errb syncBuffer
		if code := run(context.Background(), append([]string{"sluice", "override"}, args...), &out, &errb); code != 0 {
			t.Fatalf("sluice override %v: exit %d: %s %s", args, code, out.String(), errb.String())
		}
		return out.String()
	}

	if s, rate := b.source(t, "org-42:alice"); s != "policy" || rate != 5 {
		t.Fatalf("before: %s %d", s, rate)
	}
	cli("set", "--server", a.base, "orgs", "org-42:*", "--rate", "500", "--period", "1m", "--reason", "upgraded to pro")
	took := b.waitSource(t, "org-42:alice", "api_override:org-42:*", time.Second)
	t.Logf("an override set through one server applied on the other after %v", took)
	if _, rate := b.source(t, "org-42:alice"); rate != 500 {
		t.Fatalf("rate %d on the other server", rate)
	}
	if m := a.logged("override set"); m == nil || m["reason"] != "upgraded to pro" || m["after"] == "none" || m["before"] != "none" ||
		!strings.Contains(m["by"].(string), "SLUICE_ADMIN_TOKEN") || strings.Contains(m["by"].(string), "override-test-token") {
		t.Fatalf("change log: %v", m)
	}

	// Both restart: the override is in Redis, not in either process.
	a.stop(t)
	b.stop(t)
	a, b = startServe(t, bin, args...), startServe(t, bin, args...)
	for _, p := range []*serveProcess{a, b} {
		if s, rate := p.source(t, "org-42:bob"); s != "api_override:org-42:*" || rate != 500 {
			t.Fatalf("after the restart %s: %s %d", p.base, s, rate)
		}
	}
	if out := cli("list", "--server", b.base, "--policy", "orgs"); !strings.Contains(out, `"org-42:*"`) || !strings.Contains(out, "upgraded to pro") {
		t.Fatalf("list: %s", out)
	}

	// expires_in: 2s, set through b, in force on a, gone after 2 s on both.
	set := time.Now()
	cli("set", "--server", b.base, "orgs", "org-7:carol", "--rate", "50", "--period", "1m", "--expires-in", "2s")
	a.waitSource(t, "org-7:carol", "api_override", time.Second)
	for _, p := range []*serveProcess{a, b} {
		p.waitSource(t, "org-7:carol", "policy", 3*time.Second)
	}
	if gone := time.Since(set); gone < 2*time.Second {
		t.Fatalf("the override was gone after %v, before its 2s", gone)
	}
	if out := cli("get", "--server", a.base, "orgs", "org-42:*"); !strings.Contains(out, `"rate": 500`) {
		t.Fatalf("get: %s", out)
	}
	cli("rm", "--server", a.base, "orgs", "org-42:*")
	b.waitSource(t, "org-42:alice", "policy", time.Second)
}
