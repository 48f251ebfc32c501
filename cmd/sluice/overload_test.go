package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// overloadConfig pins the overload limit at 5 requests in flight (min_limit =
// max_limit), 20% of it kept for critical requests and 20% more for default ones:
// sheddable requests are admitted up to 3 in flight, default ones up to 4, critical ones
// up to 5. 127.0.0.1 is the trusted proxy.
const overloadConfig = `identity: {trusted_proxies: [127.0.0.1/32]}
overload:
  min_limit: 5
  max_limit: 5
  critical_reserve: 20
  default_reserve: 20
  max_wait: off
  criticality_header: X-Criticality
policies:
  - name: per-ip
    key: ip
    rate: 1000
    period: hour
    routes:
      "/batch/": {rate: 1000, period: hour, criticality: sheddable}
      "/pay":    {rate: 1000, period: hour, criticality: critical}
`

// heldUpstream holds every request it gets until release is closed, so that the test
// knows how many requests are in flight through the proxy.
type heldUpstream struct {
	*httptest.Server
	entered chan string
	release chan struct{}
	wg      sync.WaitGroup
}

func newHeldUpstream(t *testing.T) *heldUpstream {
	u := &heldUpstream{entered: make(chan string), release: make(chan struct{})}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.entered <- r.URL.Path
		<-u.release
	}))
	t.Cleanup(func() {
		u.open()
		u.Close()
	})
	return u
}

// open lets every held request finish, and waits for their responses.
func (u *heldUpstream) open() {
	select {
	case <-u.release:
	default:
		close(u.release)
	}
	u.wg.Wait()
}

// send sends GET url from c with header h: "held" once the upstream has it, else the
// status the proxy answered.
func (u *heldUpstream) send(t *testing.T, c *http.Client, url string, h map[string]string) string {
	t.Helper()
	answered := make(chan *http.Response, 1)
	failed := make(chan error, 1)
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		rp, err := c.Do(req)
		if err != nil {
			failed <- err
			return
		}
		answered <- rp
	}()
	select {
	case <-u.entered:
		return "held"
	case err := <-failed:
		t.Fatalf("GET %s: %v", url, err)
	case rp := <-answered:
		defer rp.Body.Close()
		body, _ := io.ReadAll(rp.Body)
		if rp.StatusCode == http.StatusServiceUnavailable {
			var p struct{ Type string }
			json.Unmarshal(body, &p)
			if p.Type != "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity" || rp.Header.Get("Retry-After") == "" {
				t.Errorf("GET %s: 503 with type %q, Retry-After %q: not a shed answer", url, p.Type, rp.Header.Get("Retry-After"))
			}
			return "shed"
		}
		return fmt.Sprint(rp.StatusCode)
	}
	return ""
}

// TestProxyOverload runs the built binary's `sluice proxy` with an overload block, on
// memory and on Redis, in front of an upstream that holds its requests: sheddable
// traffic is shed first, then default traffic, and critical traffic keeps its reserved
// share; a criticality header counts only from the trusted proxy; the metrics show the
// limit, the requests in flight and the shed requests by criticality, and each shed
// request is logged with its criticality and reason.
func TestProxyOverload(t *testing.T) {
	bin := sluiceBinary(t)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			up := newHeldUpstream(t)
			cfg := filepath.Join(t.TempDir(), "overload.yaml")
			if err := os.WriteFile(cfg, []byte(overloadConfig), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"proxy", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-format", "json",
				"--upstream", up.URL, "--config", cfg}
			if store == "redis" {
				args = append(args, "--redis", redistest.Start(t).URL(), "--deadline", "2s", "--failure-mode", "closed")
			}
			p := startBinary(t, bin, args...)
			var base string
			poll.Until(t, 20*time.Second, "the proxy's listen address logged", func() bool {
				p.mu.Lock()
				defer p.mu.Unlock()
				for _, m := range p.logs {
					if m["msg"] == "sluice proxy starting" {
						base = "http://" + m["listen"].(string)
						return true
					}
				}
				return false
			})
			client, trusted := peer("127.0.0.2"), peer("127.0.0.1")
			claim := func(c string) map[string]string { return map[string]string{"X-Criticality": c} }
			steps := []struct {
				c      *http.Client
				path   string
				header map[string]string
				want   string
			}{
				{client, "/batch/1", nil, "held"},
				{client, "/batch/2", nil, "held"},
				{client, "/batch/3", nil, "held"},
				{client, "/batch/4", nil, "shed"}, // sheddable: 3 of 5
				{client, "/x", nil, "held"},       // default: 4 of 5
				{client, "/batch/5", nil, "shed"},
				{client, "/y", nil, "shed"},
				{client, "/y", claim("critical"), "shed"}, // a client's claim is not believed
				{trusted, "/y", claim("critical"), "held"},
				{client, "/pay", nil, "shed"}, // the limit is full
			}
			for i, s := range steps {
				if got := up.send(t, s.c, base+s.path, s.header); got != s.want {
					t.Fatalf("step %d: GET %s %v: %s, want %s", i, s.path, s.header, got, s.want)
				}
			}
			metric := func(name string) float64 { return metricValue(t, p.base, name) }
			for name, want := range map[string]float64{
				"sluice_overload_limit":    5,
				"sluice_overload_inflight": 5,
				"sluice_overload_queued":   0,
				`sluice_overload_shed_total{criticality="sheddable",reason="limit"}`: 2,
				`sluice_overload_shed_total{criticality="default",reason="limit"}`:   2,
				`sluice_overload_shed_total{criticality="critical",reason="limit"}`:  1,
				`sluice_overload_admitted_total{criticality="sheddable"}`:            3,
				`sluice_overload_admitted_total{criticality="default"}`:              1,
				`sluice_overload_admitted_total{criticality="critical"}`:             1,
			} {
				if got := metric(name); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			up.open()
			poll.Until(t, 10*time.Second, "the permits ended", func() bool { return metric("sluice_overload_inflight") == 0 })
			// With the requests done, a sheddable one is admitted again (and, the upstream
			// open, answered at once).
			if got := up.send(t, client, base+"/batch/6", nil); got != "held" {
				t.Errorf("a sheddable request after the others ended: %s, want held", got)
			}
			up.open()

			p.mu.Lock()
			defer p.mu.Unlock()
			var shed []string
			for _, m := range p.logs {
				if m["msg"] == "request shed (overload)" {
					if m["level"] != "WARN" || m["limit"] != 5.0 {
						t.Errorf("shed record %v", m)
					}
					shed = append(shed, fmt.Sprint(m["criticality"], " ", m["reason"], " ", m["path"]))
				}
			}
			want := []string{"sheddable limit /batch/4", "sheddable limit /batch/5", "default limit /y", "default limit /y", "critical limit /pay"}
			if strings.Join(shed, ",") != strings.Join(want, ",") {
				t.Errorf("shed records %q, want %q", shed, want)
			}
		})
	}
}
