package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// upstream is a test upstream that counts the connections it accepts and remembers the
// protocol of the last request.
type upstream struct {
	*httptest.Server
	conns atomic.Int64
	proto atomic.Value
}

func startUpstream(t *testing.T, h2c bool) *upstream {
	u := &upstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.proto.Store(r.Proto)
		io.WriteString(w, "upstream")
	}))
	u.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	if h2c {
		u.Config.Protocols = new(http.Protocols)
		u.Config.Protocols.SetHTTP1(true)
		u.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	u.Start()
	t.Cleanup(u.Close)
	return u
}

// TestProxyReusesUpstreamConnections: 16 clients sending 400 requests through `sluice
// proxy` open about one upstream connection each (a request that finds the pool empty for
// the instant a connection is being returned dials one more), not one per request: at
// steady state no request opens one. With Go's default of 2 idle connections per host,
// most of the 400 requests dialled.
func TestProxyReusesUpstreamConnections(t *testing.T) {
	up := startUpstream(t, false)
	cfg := writeConfig(t, "p.yaml", "policies:\n  - {name: per-ip, key: ip, algorithm: gcra, rate: 100000, period: second}\n")
	base := "http://" + startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg, "--log-level", "warn")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			for range 25 {
				rp, err := client.Get(base + "/x")
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, rp.Body)
				rp.Body.Close()
				if rp.StatusCode != 200 {
					errs <- fmt.Errorf("status %d", rp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := up.conns.Load(); n > 32 {
		t.Fatalf("the upstream accepted %d connections for 400 requests from 16 clients, want at most 32", n)
	}
}

// TestProxyUpstreamHTTP2: with --upstream-http2 the proxy speaks cleartext HTTP/2 to an
// upstream that does, and HTTP/1.1 without it.
func TestProxyUpstreamHTTP2(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprint("http2=", h2), func(t *testing.T) {
			up := startUpstream(t, true)
			cfg := writeConfig(t, "p.yaml", "policies:\n  - {name: per-ip, key: ip, algorithm: gcra, rate: 100, period: second}\n")
			args := []string{"--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg, "--log-level", "warn"}
			if h2 {
				args = append(args, "--upstream-http2")
			}
			base := "http://" + startedProxy(t, args...)
			rp, err := http.Get(base + "/x")
			if err != nil {
				t.Fatal(err)
			}
			rp.Body.Close()
			want := "HTTP/1.1"
			if h2 {
				want = "HTTP/2.0"
			}
			if got, _ := up.proto.Load().(string); rp.StatusCode != 200 || got != want {
				t.Fatalf("status %d, upstream saw %q, want %q", rp.StatusCode, got, want)
			}
		})
	}
}
