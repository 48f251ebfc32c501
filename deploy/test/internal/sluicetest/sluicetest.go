// Package sluicetest runs what deploy/test's tests check against: the sluice binary, built
// from the main module, and real redis-server processes on free loopback ports.
package sluicetest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Build builds the sluice binary from the main module, the directory root, into dir and
// returns its path.
func Build(root, dir string) (string, error) {
	bin := filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building sluice: %v\n%s", err, out)
	}
	return bin, nil
}

// Main is a TestMain: it builds sluice from the main module at root into a temporary
// directory, sets *bin to its path, runs the tests and exits.
func Main(m *testing.M, root string, bin *string) {
	dir, err := os.MkdirTemp("", "sluicetest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *bin, err = Build(root, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Redis is a redis-server on a free loopback port, stopped when the test ends.
type Redis struct {
	cmd  *exec.Cmd
	addr string
}

// StartRedis starts a redis-server, failing t with how to install it when it is missing.
func StartRedis(t *testing.T) *Redis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found in PATH: install Redis 7 with `apt-get install redis-server` (Debian/Ubuntu) or run `make test`, which installs it when missing")
	}
	port := freePort(t)
	r := &Redis{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	r.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.cmd.Process.Signal(syscall.SIGCONT)
		r.cmd.Process.Kill()
		r.cmd.Wait()
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.Dial("tcp", r.addr); err == nil {
			c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if line == "+PONG\r\n" {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer PING within 15s", r.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL is the server's redis:// URL.
func (r *Redis) URL() string { return "redis://" + r.addr }

// Pause freezes the server (SIGSTOP): a Redis that stops answering.
func (r *Redis) Pause() { r.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume thaws a paused server (SIGCONT).
func (r *Redis) Resume() { r.cmd.Process.Signal(syscall.SIGCONT) }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Service is a running `sluice serve`, or `sluice proxy` with its admin listener.
type Service struct {
	Cmd      *exec.Cmd
	Base     string // http://host:port: serve's HTTP API, proxy's admin listener
	GRPCAddr string // serve's
	Listen   string // proxy's: the address it proxies on
	log      chan map[string]any
	exited   chan struct{} // closed when its stderr ends: the process exited
	lastLog  atomic.Value  // string: the last line it logged
}

// StartServe runs bin (sluice) serve on free loopback ports with args, until the test
// ends.
func StartServe(t *testing.T, bin string, args ...string) *Service {
	t.Helper()
	s := start(t, bin, append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
		"--log-format", "json"}, args...))
	for s.Base == "" || s.GRPCAddr == "" {
		m := s.waitLog(t, "serving HTTP", "serving gRPC")
		addr, _ := m["addr"].(string)
		if m["msg"] == "serving HTTP" {
			s.Base = "http://" + addr
		} else {
			s.GRPCAddr = addr
		}
	}
	return s
}

// StartProxy runs bin (sluice) proxy, and its admin listener (Base), on free loopback
// ports with args (--upstream among them), until the test ends.
func StartProxy(t *testing.T, bin string, args ...string) *Service {
	t.Helper()
	s := start(t, bin, append([]string{"proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--log-format", "json"}, args...))
	for s.Base == "" || s.Listen == "" {
		m := s.waitLog(t, "serving HTTP", "sluice proxy starting")
		if m["msg"] == "serving HTTP" {
			s.Base = "http://" + m["addr"].(string)
		} else {
			s.Listen = m["listen"].(string)
		}
	}
	return s
}

// start runs bin with args, which make it log JSON, until the test ends.
func start(t *testing.T, bin string, args []string) *Service {
	t.Helper()
	s := &Service{log: make(chan map[string]any, 1000), exited: make(chan struct{})}
	s.Cmd = exec.Command(bin, args...)
	stderr, err := s.Cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.Cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			s.Cmd.Process.Kill()
		}
	})
	go func() {
		defer close(s.exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			s.lastLog.Store(sc.Text())
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				select {
				case s.log <- m:
				default:
				}
			}
		}
	}()
	return s
}

// waitLog waits for a log record with one of the messages.
func (s *Service) waitLog(t *testing.T, msgs ...string) map[string]any {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case m := <-s.log:
			for _, msg := range msgs {
				if m["msg"] == msg {
					return m
				}
			}
		case <-s.exited:
			t.Fatalf("sluice %s exited before logging any of %q; its last words: %v",
				s.Cmd.Args[1], msgs, s.lastLog.Load())
		case <-timeout:
			t.Fatalf("sluice %s logged none of %q within 30s", s.Cmd.Args[1], msgs)
		}
	}
}

// Check posts a JSON request to /v1/check and returns the response's status.
func (s *Service) Check(t *testing.T, body string) int {
	t.Helper()
	resp, err := http.Post(s.Base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Metrics returns the /metrics page.
func (s *Service) Metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(s.Base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
