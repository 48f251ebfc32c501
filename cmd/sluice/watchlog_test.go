package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/poll"
)

// TestBinaryLogBesideConfig: `sluice serve --config sluice.yaml --log-level debug >
// sluice.log 2>&1` run in the configuration's directory does not feed its own log back to
// itself. Every write to sluice.log is an event in the watched directory; the watcher
// logged each such event, which was itself a write, and the service wrote megabytes a
// second of "file event ignored" (issue 39, item 6). The fence is the watcher's own work:
// after five reloads, each waited for in the log, the log holds a few records per reload,
// not the thousands the loop wrote meanwhile.
func TestBinaryLogBesideConfig(t *testing.T) {
	bin := sluiceBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "sluice.yaml")
	write := func(rate int) {
		t.Helper()
		if err := os.WriteFile(cfg, fmt.Appendf(nil, "policies:\n  - {name: p, key: ip, algorithm: gcra, rate: %d, period: hour}\n", rate), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	logPath := filepath.Join(dir, "sluice.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "serve", "--config", "sluice.yaml", "--log-level", "debug",
		"--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	logged := func() string {
		b, err := os.ReadFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// waitCount waits until the log holds n records with msg.
	waitCount := func(msg string, n int) {
		t.Helper()
		poll.UntilDescribed(t, 30*time.Second, fmt.Sprintf("%q logged %d times", msg, n), func() bool {
			select {
			case err := <-exited:
				t.Fatalf("serve exited (%v) before logging %q %d times:\n%.3000s", err, msg, n, logged())
			default:
			}
			return strings.Count(logged(), `"msg":"`+msg+`"`) >= n
		}, func() string { return fmt.Sprintf("the log is %d bytes", len(logged())) })
	}
	waitCount("serving HTTP", 1)
	const reloads = 5
	for i := 1; i <= reloads; i++ {
		write(1 + i)
		waitCount("config: reloaded", i)
	}
	log := logged()
	lines := strings.Count(log, "\n")
	// Start-up writes about ten records; each reload a few (its file events, the reload);
	// the ignored events one summary in all.
	if lines > 100 {
		t.Errorf("%d log records (%d bytes) over %d reloads; the ignored events: %d records, e.g.\n%s",
			lines, len(log), reloads, strings.Count(log, "ignored"), firstLines(grepLines(log, "ignored"), 3))
	}
}

// firstLines returns the first n lines of s.
func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	if len(l) > n {
		l = l[:n]
	}
	return strings.Join(l, "\n")
}
