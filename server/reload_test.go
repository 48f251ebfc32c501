package server

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/poll"
)

// reloadConfig is a domain whose one rule is named after the version.
func reloadConfig(version string) string {
	return fmt.Sprintf(`domain: hot
descriptors:
  - key: k
    rate_limit:
      name: %s
      unit: hour
      requests_per_unit: 1000000000
`, version)
}

// writeAtomically replaces path by renaming a new file over it, as editors and
// ConfigMap updates do.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestHotReloadUnderLoad: while callers send ShouldRateLimit and /v1/check without pause,
// the configuration file is replaced again and again, sometimes by an invalid one. No
// request fails, every answer comes from one complete configuration, an invalid file
// never takes effect (and is counted), and the last valid one ends up in force.
func TestHotReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hot.yaml")
	writeAtomically(t, path, reloadConfig("v0"))
	w, err := config.NewWatcher(path, config.WithDebounce(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	st := memoryStack(t, w.Config())
	s, err := New(Options{Limiter: st.Limiter(), Ready: st.Ready, Watcher: w})
	if err != nil {
		t.Fatal(err)
	}
	r := serve(t, s)

	var (
		stop     atomic.Bool
		requests atomic.Int64
		seen     sync.Map // rule names answered
		errs     = make(chan error, 64)
		wg       sync.WaitGroup
	)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for g := range 8 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				if g%2 == 0 {
					resp, err := r.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
						Domain: "hot", Descriptors: []*ratelimitDescriptor{desc("k", fmt.Sprint(g, "-", i))}})
					if err != nil {
						report(fmt.Errorf("ShouldRateLimit: %w", err))
						return
					}
					if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit == nil {
						report(fmt.Errorf("ShouldRateLimit answered %v", resp))
						return
					}
					seen.Store(resp.Statuses[0].CurrentLimit.Name, true)
				} else {
					rp, err := http.Post(r.base+"/v1/check", "application/json",
						strings.NewReader(fmt.Sprintf(`{"domain":"hot","descriptors":[{"entries":[{"key":"k","value":"%d-%d"}]}]}`, g, i)))
					if err != nil {
						report(fmt.Errorf("/v1/check: %w", err))
						return
					}
					rp.Body.Close()
					if rp.StatusCode != 200 {
						report(fmt.Errorf("/v1/check answered %d", rp.StatusCode))
						return
					}
				}
				requests.Add(1)
			}
		})
	}

	waitFor := func(name string) {
		t.Helper()
		var resp *rlsv3.RateLimitResponse
		var err error
		poll.UntilDescribed(t, 10*time.Second, fmt.Sprintf("rule %q in force", name), func() bool {
			resp, err = r.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
				Domain: "hot", Descriptors: []*ratelimitDescriptor{desc("k", "probe")}})
			return err == nil && resp.Statuses[0].CurrentLimit.GetName() == name
		}, func() string { return fmt.Sprintf("last answer %v, %v", resp, err) })
	}
	rejectedBefore := w.Rejected()
	for v := 1; v <= 6; v++ {
		name := fmt.Sprintf("v%d", v)
		writeAtomically(t, path, reloadConfig(name))
		waitFor(name)
		// An invalid file: the rule in force stays.
		writeAtomically(t, path, "domain: hot\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
		poll.Until(t, 10*time.Second, "the invalid file rejected", func() bool { return w.Rejected() != rejectedBefore })
		rejectedBefore = w.Rejected()
		waitFor(name)
	}
	// SIGHUP's path: Reload with an unchanged valid file changes nothing.
	if err := w.Reload(); err == nil {
		t.Fatal("Reload of the invalid file succeeded")
	}
	writeAtomically(t, path, reloadConfig("final"))
	if err := w.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	waitFor("final")
	base := requests.Load()
	poll.Until(t, 10*time.Second, "more requests on the final configuration", func() bool { return requests.Load() >= base+50 })
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen.Range(func(k, _ any) bool {
		if n := k.(string); !strings.HasPrefix(n, "v") && n != "final" {
			t.Errorf("answered with rule %q, which no valid configuration has", n)
		}
		return true
	})
	if requests.Load() < 100 {
		t.Fatalf("only %d requests were made during the reloads", requests.Load())
	}
	m := do(t, "GET", r.base+"/metrics", "")
	if w.Rejected() < 7 {
		t.Errorf("%d rejected reloads counted, want at least 7", w.Rejected())
	}
	for _, want := range []string{fmt.Sprintf("sluice_config_reload_rejected_total %d", w.Rejected()), "sluice_config_last_reload_successful 1"} {
		if !strings.Contains(m.body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	t.Logf("%d requests during %d reloads and %d rejected reloads", requests.Load(), w.Reloads(), w.Rejected())
}

// slowLimiter holds every decision until release is closed, so that requests are in
// flight when the server is asked to stop.
type slowLimiter struct {
	sluice.Limiter
	release chan struct{}
	started chan struct{}
	once    sync.Once
}

func (l *slowLimiter) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	l.once.Do(func() { close(l.started) })
	<-l.release
	return l.Limiter.Decide(ctx, reqs, ds)
}

// TestGracefulShutdown: requests in flight when Serve's context ends are answered, new
// connections are refused, and Serve returns only after that.
func TestGracefulShutdown(t *testing.T) {
	for _, api := range []string{"http", "grpc"} {
		t.Run(api, func(t *testing.T) {
			cfg := loadConfig(t, "policies.yaml", "edge.yaml")
			st := memoryStack(t, cfg)
			slow := &slowLimiter{Limiter: st.Limiter(), release: make(chan struct{}), started: make(chan struct{})}
			s, err := New(Options{Limiter: slow, Ready: st.Ready, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			r := serve(t, s)
			done := make(chan error, 1)
			go func() {
				if api == "http" {
					rp, err := http.Post(r.base+"/v1/check", "application/json", strings.NewReader(`{"policy":"per-ip","key":"1.2.3.4"}`))
					if err == nil {
						rp.Body.Close()
						if rp.StatusCode != 200 {
							err = fmt.Errorf("status %d", rp.StatusCode)
						}
					}
					done <- err
					return
				}
				_, err := r.rls.ShouldRateLimit(context.Background(), edgeReq(desc("remote_address", "1.2.3.4")))
				done <- err
			}()
			<-slow.started
			stopped := make(chan error, 1)
			go func() { stopped <- r.stop() }()
			// The request is held until the server refuses new connections: it is then
			// in flight during the shutdown.
			refused := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			poll.Until(t, 10*time.Second, "new connections refused", func() bool {
				rp, err := refused.Get(r.base + "/healthz")
				if err == nil {
					rp.Body.Close()
				}
				return err != nil
			})
			close(slow.release)
			if err := <-done; err != nil {
				t.Fatalf("the request in flight failed: %v", err)
			}
			if err := <-stopped; err != nil {
				t.Fatalf("Serve: %v", err)
			}
			if _, err := http.Get(r.base + "/healthz"); err == nil {
				t.Fatal("a new connection was accepted after shutdown")
			}
		})
	}
}
