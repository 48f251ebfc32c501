package deploytest

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

// sluiceBin is the sluice binary TestMain builds from the main module.
var sluiceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deploytest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sluiceBin = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", sluiceBin, "./cmd/sluice")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sluice: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// redisServer is a redis-server on a free loopback port, stopped when the test ends.
type redisServer struct {
	cmd  *exec.Cmd
	addr string
}

func startRedis(t *testing.T) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found in PATH: install Redis 7 with `apt-get install redis-server` (Debian/Ubuntu) or run `make test`, which installs it when missing")
	}
	port := freePort(t)
	r := &redisServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
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

func (r *redisServer) url() string { return "redis://" + r.addr }

// pause and resume freeze and thaw the server (SIGSTOP, SIGCONT): a Redis that stops
// answering.
func (r *redisServer) pause()  { r.cmd.Process.Signal(syscall.SIGSTOP) }
func (r *redisServer) resume() { r.cmd.Process.Signal(syscall.SIGCONT) }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// service is a running `sluice serve`.
type service struct {
	cmd      *exec.Cmd
	base     string // http://host:port
	grpcAddr string
	log      chan map[string]any
	exited   chan struct{} // closed when its stderr ends: the process exited
	lastLog  atomic.Value  // string: the last line it logged
}

// startServe runs `sluice serve` on free loopback ports with args, until the test ends.
func startServe(t *testing.T, args ...string) *service {
	t.Helper()
	s := &service{log: make(chan map[string]any, 1000), exited: make(chan struct{})}
	s.cmd = exec.Command(sluiceBin, append([]string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			s.cmd.Process.Kill()
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
	for s.base == "" || s.grpcAddr == "" {
		m := s.waitLog(t, "serving HTTP", "serving gRPC")
		addr, _ := m["addr"].(string)
		if m["msg"] == "serving HTTP" {
			s.base = "http://" + addr
		} else {
			s.grpcAddr = addr
		}
	}
	return s
}

// waitLog waits for a log record with one of the messages.
func (s *service) waitLog(t *testing.T, msgs ...string) map[string]any {
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
			t.Fatalf("sluice serve exited before logging any of %q; its last words: %v", msgs, s.lastLog.Load())
		case <-timeout:
			t.Fatalf("sluice serve logged none of %q within 30s", msgs)
		}
	}
}

// check posts a JSON request to /v1/check and returns the response's status.
func (s *service) check(t *testing.T, body string) int {
	t.Helper()
	resp, err := http.Post(s.base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// metrics returns the /metrics page.
func (s *service) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
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
