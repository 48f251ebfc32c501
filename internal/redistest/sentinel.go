package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Sentinel is a redis-server in Sentinel mode monitoring one primary, owned by a test.
type Sentinel struct {
	*Server
	// Name is the monitored master's name, as clients ask Sentinel for it.
	Name string
}

// StartSentinel starts a Sentinel (quorum 1) monitoring primary under name, waits until it
// reports the primary's address, and stops it when the test ends.
func StartSentinel(tb testing.TB, primary *Server, name string) *Sentinel {
	tb.Helper()
	s := newServer(tb)
	conf := filepath.Join(s.dir, "sentinel.conf")
	body := fmt.Sprintf("bind 127.0.0.1\nprotected-mode no\ndir %s\nlogfile redis.log\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %s 1000\n"+
		"sentinel failover-timeout %s 5000\n",
		s.dir, name, primary.Port(), name, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatalf("redistest: write sentinel.conf: %v", err)
	}
	s.conf = []string{conf, "--sentinel"}
	s.launchNew()

	want := primary.Addr()
	wait(tb, "sentinel on "+s.Addr()+" reports "+want+" for "+name, func() error {
		reply, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
		if host, port, ok := strings.Cut(reply, "\n"); err == nil && ok && net.JoinHostPort(host, port) == want {
			return nil
		}
		return fmt.Errorf("%q %v", reply, err)
	})
	return &Sentinel{Server: s, Name: name}
}
