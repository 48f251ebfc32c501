package redistest

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestServerCommands(t *testing.T) {
	t.Parallel()
	s := Start(t, WithConfig("maxmemory-policy", "noeviction"))
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"GET", "missing"}, "(nil)"},
		{[]string{"INCRBY", "n", "41"}, "41"},
		{[]string{"RPUSH", "l", "a", "b"}, "2"},
		{[]string{"LRANGE", "l", "0", "-1"}, "a\nb"},
		{[]string{"CONFIG", "GET", "maxmemory-policy"}, "maxmemory-policy\nnoeviction"},
	}
	for _, tt := range tests {
		if got := s.MustDo(tt.args...); got != tt.want {
			t.Errorf("%v = %q, want %q", tt.args, got, tt.want)
		}
	}
	if _, err := s.Do("NOSUCHCOMMAND"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("unknown command: err = %v, want a reply error", err)
	}
	if out, err := s.CLI("GET", "k"); err != nil || strings.TrimSpace(out) != "v" {
		t.Errorf("CLI GET = %q, %v; want v", out, err)
	}
	if v, err := s.Info("redis_version"); err != nil || !strings.HasPrefix(v, "7.") && !strings.HasPrefix(v, "8.") {
		t.Errorf("Info(redis_version) = %q, %v", v, err)
	}
}

func TestKillRestartKeepsPortAndDir(t *testing.T) {
	t.Parallel()
	s := Start(t)
	port, dir := s.Port(), s.Dir()
	s.MustDo("SET", "k", "v")
	s.Kill()
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	s.Restart()
	if s.Port() != port || s.Dir() != dir {
		t.Errorf("restart moved the server: port %d→%d, dir %s→%s", port, s.Port(), dir, s.Dir())
	}
	if got := s.MustDo("GET", "k"); got != "(nil)" {
		t.Errorf("GET after restart without persistence = %q, want (nil)", got)
	}
}

func TestRestartWithPersistenceKeepsData(t *testing.T) {
	t.Parallel()
	s := Start(t, WithConfig("appendonly", "yes"), WithConfig("appendfsync", "always"))
	s.MustDo("SET", "k", "v")
	s.Kill()
	s.Restart()
	if got := s.MustDo("GET", "k"); got != "v" {
		t.Errorf("GET after restart with AOF = %q, want v", got)
	}
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Pause()
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 16)
	if n, err := conn.Read(buf); err == nil {
		t.Fatalf("paused server answered %q", buf[:n])
	}
	s.Resume()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("after Resume: %q, %v; want +PONG", buf[:n], err)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t)
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(c.Nodes))
	}
	keys := []string{"a", "user:1", "{user}:1", "{user}:2", "x{}y", "{}{z}", "a{b}c{d}", "{{x}}", strings.Repeat("k", 1000)}
	for _, key := range keys {
		want := c.Nodes[0].MustDo("CLUSTER", "KEYSLOT", key)
		if got := fmt.Sprint(Slot(key)); got != want {
			t.Errorf("Slot(%q) = %s, CLUSTER KEYSLOT says %s", key, got, want)
		}
		owner := c.NodeForKey(key)
		for _, n := range c.Nodes {
			_, err := n.Do("SET", key, "v")
			if n == owner && err != nil {
				t.Errorf("SET %q on its owner %s: %v", key, n.Addr(), err)
			}
			if n != owner && (err == nil || !strings.HasPrefix(err.Error(), "MOVED")) {
				t.Errorf("SET %q on %s (not its owner): err = %v, want MOVED", key, n.Addr(), err)
			}
		}
	}
	// A restarted node keeps its identity (nodes.conf in its data dir) and the cluster heals.
	c.Nodes[1].Kill()
	c.Nodes[1].Restart()
	c.WaitHealthy()
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	primary := Start(t)
	s := StartSentinel(t, primary, "mymaster")
	got := s.MustDo("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
	if want := "127.0.0.1\n" + fmt.Sprint(primary.Port()); got != want {
		t.Errorf("sentinel reports %q, want %q", got, want)
	}
}

// fatalRecorder captures Fatalf instead of failing the real test.
type fatalRecorder struct {
	testing.TB
	mu  sync.Mutex
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.msg = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func TestMissingBinaryFailsWithInstallHint(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Start(rec)
	}()
	<-done
	if !strings.Contains(rec.msg, "redis-server not found") || !strings.Contains(rec.msg, "apt-get install redis-server") {
		t.Errorf("message = %q, want it to name redis-server and say how to install it", rec.msg)
	}
}
