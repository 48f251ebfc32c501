// Package redistest starts real redis-server processes for tests: a standalone server
// (Start), a 3-primary cluster (StartCluster) and a Sentinel watching a server
// (StartSentinel). Each listens on a free loopback port with its own data directory and is
// stopped when the test ends.
//
// Servers can be hurt the way production servers are: Kill (SIGKILL), Pause and Resume
// (SIGSTOP, SIGCONT), and Restart on the same port and data directory. Commands are sent
// with Do (a small RESP client) or CLI (the redis-cli binary).
//
// redis-server and redis-cli must be installed. When they are missing, the test fails (it
// never skips) with a message saying how to install them.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/poll"
)

// InstallHint says how to get the binaries the tests need.
const InstallHint = "install Redis 7 with `apt-get install redis-server` (Debian/Ubuntu) " +
	"or run `make test`, which installs it when missing"

// startTimeout bounds how long a server may take to accept commands.
const startTimeout = 15 * time.Second

// Binary returns the path of the named Redis binary (redis-server or redis-cli), failing tb
// with InstallHint when it is not installed.
func Binary(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("redistest: %s not found in PATH: %v; %s", name, err, InstallHint)
	}
	return path
}

// Option configures a server before it starts.
type Option func(*config)

type config struct{ args []string }

// WithConfig sets a redis.conf directive, as `--name value...` on the command line, for
// example WithConfig("maxmemory", "1mb") or WithConfig("appendonly", "yes").
func WithConfig(name string, values ...string) Option {
	return func(c *config) { c.args = append(append(c.args, "--"+name), values...) }
}

// Server is a redis-server process owned by a test. Its methods may be called from any
// goroutine.
type Server struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	conf []string // leading arguments: a config file, --sentinel
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts a standalone redis-server on a free loopback port, waits until it accepts
// commands, and stops it when the test ends. The server has no persistence (save "",
// appendonly no) unless options say otherwise, so a Restart starts empty.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	return start(tb, nil, opts)
}

func start(tb testing.TB, base []string, opts []Option) *Server {
	tb.Helper()
	var c config
	for _, o := range opts {
		o(&c)
	}
	s := newServer(tb)
	s.args = append(append([]string{
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", "redis.log",
		"--daemonize", "no",
		"--enable-debug-command", "yes",
	}, base...), c.args...)
	s.launchNew()
	return s
}

func newServer(tb testing.TB) *Server {
	tb.Helper()
	s := &Server{tb: tb, bin: Binary(tb, "redis-server"), dir: tb.TempDir()}
	tb.Cleanup(s.cleanup)
	return s
}

// launchNew picks a free port and launches, retrying when the port was taken meanwhile.
func (s *Server) launchNew() {
	s.tb.Helper()
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		s.port, err = freePort()
		if err != nil {
			break
		}
		if err = s.launch(); err == nil {
			return
		}
	}
	s.tb.Fatalf("redistest: start redis-server: %v", err)
}

// Addr is the server's "127.0.0.1:port".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port is the server's TCP port. It stays the same across Restart.
func (s *Server) Port() int { return s.port }

// URL is "redis://127.0.0.1:port".
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Dir is the server's data directory (holding redis.log). It stays the same across Restart.
func (s *Server) Dir() string { return s.dir }

// Log returns the server's log file so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return string(b)
}

// launch starts the process on s.port and waits until it answers PING, failing the test
// after startTimeout; its error is a process that exited at start (its port taken).
func (s *Server) launch() error {
	args := append(append(append([]string(nil), s.conf...), "--port", strconv.Itoa(s.port)), s.args...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	// Die with the test binary, and keep terminal signals (Ctrl-C) to the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()

	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	exited := false
	wait(s.tb, fmt.Sprintf("redis-server on port %d ready", s.port), func() error {
		select {
		case <-done:
			exited = true
			return nil
		default:
		}
		reply, err := s.Do("PING")
		// A server that demands authentication (requirepass, ACL users) is up too.
		var rerr ReplyError
		if err == nil && reply == "PONG" || errors.As(err, &rerr) &&
			(strings.HasPrefix(string(rerr), "NOAUTH") || strings.HasPrefix(string(rerr), "WRONGPASS")) {
			return nil
		}
		return fmt.Errorf("last: %q, %v\n%s", reply, err, tail(s.Log(), 20))
	})
	if exited {
		return fmt.Errorf("redis-server on port %d exited at start: %s\n%s", s.port, stderr.String(), tail(s.Log(), 20))
	}
	return nil
}

// Kill sends SIGKILL and waits for the process to exit. The port and data directory are
// kept for Restart. Killing a stopped server is a no-op.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Pause sends SIGSTOP: the server keeps its connections but answers nothing until Resume.
func (s *Server) Pause() { s.tb.Helper(); s.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT to a paused server.
func (s *Server) Resume() { s.tb.Helper(); s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Errorf("redistest: signal %v: server on port %d is not running", sig, s.port)
		return
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Errorf("redistest: signal %v to port %d: %v", sig, s.port, err)
	}
}

// Restart kills the server if it is running and starts it again on the same port and data
// directory, waiting until it accepts commands. Without persistence options the restarted
// server is empty.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	// The port may be taken meanwhile, or briefly refused by the kernel: retry.
	wait(s.tb, "restart", s.launch)
}

// wait returns as soon as f returns nil, and fails tb with what and f's last error when
// that takes longer than startTimeout.
func wait(tb testing.TB, what string, f func() error) {
	tb.Helper()
	var err error
	poll.UntilDescribed(tb, startTimeout, "redistest: "+what, func() bool { err = f(); return err == nil },
		func() string { return err.Error() })
}

// Running reports whether the process is alive (it may be paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return done != nil // never launched: not running
	}
}

func (s *Server) cleanup() {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process cannot be waited on cleanly
	}
	s.Kill()
}

// Do sends one command to the server (see the package-level Do).
func (s *Server) Do(args ...string) (string, error) { return Do(s.Addr(), args...) }

// MustDo is Do that fails the test on error.
func (s *Server) MustDo(args ...string) string {
	s.tb.Helper()
	reply, err := s.Do(args...)
	if err != nil {
		s.tb.Fatalf("redistest: %s on %s: %v", strings.Join(args, " "), s.Addr(), err)
	}
	return reply
}

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls int64
	Usec  float64
}

// CommandStats reads INFO commandstats, by command name ("eval", "evalsha",
// "client|setinfo", ...).
func (s *Server) CommandStats() (map[string]CommandStat, error) {
	reply, err := s.Do("INFO", "commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]CommandStat{}
	for _, line := range strings.Split(reply, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, ok2 := strings.CutPrefix(name, "cmdstat_")
		if !ok || !ok2 {
			continue
		}
		var st CommandStat
		if _, err := fmt.Sscanf(fields, "calls=%d,usec=%g", &st.Calls, &st.Usec); err != nil {
			return nil, fmt.Errorf("redistest: INFO commandstats: %s: %w", line, err)
		}
		out[name] = st
	}
	return out, nil
}

// ScriptStats sums the calls and microseconds of the script commands (EVAL, EVALSHA and
// their read-only forms) in INFO commandstats.
func (s *Server) ScriptStats() (calls int64, usec float64) {
	stats, err := s.CommandStats()
	if err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
	for name, st := range stats {
		if strings.HasPrefix(name, "eval") {
			calls += st.Calls
			usec += st.Usec
		}
	}
	return calls, usec
}

// CLI runs redis-cli against the server with the given arguments and returns its output.
func (s *Server) CLI(args ...string) (string, error) {
	return cli(s.tb, append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port)}, args...)...)
}

// Info returns one field of INFO (for example "evicted_keys" or "used_memory").
func (s *Server) Info(field string) (string, error) {
	reply, err := s.Do("INFO")
	if err != nil {
		return "", err
	}
	return InfoField(reply, field)
}

// InfoField extracts field from the text of an INFO reply.
func InfoField(info, field string) (string, error) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("redistest: no %q in INFO", field)
}

func cli(tb testing.TB, args ...string) (string, error) {
	out, err := exec.Command(Binary(tb, "redis-cli"), args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("redis-cli %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Do sends one command to addr over a fresh connection and returns the reply formatted as
// text: simple strings and bulk strings as they are, integers in decimal, nil as "(nil)",
// arrays one element per line (nested arrays flattened). An error reply is an error.
func Do(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write(b.Bytes()); err != nil {
		return "", err
	}
	var out strings.Builder
	if err := readReply(bufio.NewReader(conn), &out); err != nil {
		return "", err
	}
	return strings.TrimSuffix(out.String(), "\n"), nil
}

// ReplyError is an error reply from Redis, such as "ERR unknown command".
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

func readReply(r *bufio.Reader, out *strings.Builder) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		out.WriteString(line[1:])
		out.WriteByte('\n')
	case '-':
		return ReplyError(line[1:])
	case '$', '*':
		n, err := strconv.Atoi(line[1:])
		switch {
		case err != nil:
			return fmt.Errorf("redistest: bad length %q", line)
		case n < 0:
			out.WriteString("(nil)\n")
		case line[0] == '*':
			for range n {
				if err := readReply(r, out); err != nil {
					return err
				}
			}
		default:
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return err
			}
			out.Write(buf[:n])
			out.WriteByte('\n')
		}
	default:
		return fmt.Errorf("redistest: unexpected reply %q", line)
	}
	return nil
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, lines int) string {
	parts := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}
