package server

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/memory"
)

// descriptorCounts returns sluice_envoy_descriptors_total by "domain rule result".
func descriptorCounts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_envoy_descriptors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			out[l["domain"]+" "+l["rule"]+" "+l["result"]] = m.GetCounter().GetValue()
		}
	}
	return out
}

// metricsConfig has a rule for each result of sluice_envoy_descriptors_total; version
// names the limited rule, so that a reload brings new rules with the same full keys.
func metricsConfig(version string) string {
	return fmt.Sprintf(`domain: m
descriptors:
  - key: a
    rate_limit: {name: %s, unit: hour, requests_per_unit: 1}
  - key: u
    rate_limit: {unlimited: true}
  - key: s
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: r
    rate_limit: {name: old, unit: hour, requests_per_unit: 5}
  - key: n
    rate_limit: {name: new, replaces: [{name: old}], unit: hour, requests_per_unit: 5}
`, version)
}

// TestDescriptorCounters: each answered descriptor is counted once under its domain, its
// rule's full key ("override" for a request's limit override, "" for none) and its
// result, and a reload keeps counting the configured rules in the same series.
func TestDescriptorCounters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.yaml")
	writeAtomically(t, path, metricsConfig("v0"))
	w, err := config.NewWatcher(path, config.WithDebounce(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	store := memory.New(memory.WithClock(clocktest.Running(clocktest.MidHour))) // hour-long windows: none ends during the test
	t.Cleanup(func() { store.Close() })
	reg := prometheus.NewRegistry()
	s, err := New(Options{Limiter: store, Watcher: w, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(ds ...*ratelimitDescriptor) {
		t.Helper()
		if _, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "m", Descriptors: ds}); err != nil {
			t.Fatal(err)
		}
	}
	ask(desc("a", "1"))
	ask(desc("a", "1"))
	ask(desc("u", "1"))
	ask(desc("zz", "1"))
	ask(desc("s", "1"))
	ask(desc("s", "1"))
	ask(desc("r", "1"), desc("n", "1"))
	ask(withOverride(desc("a", "2"), 10, typev3.RateLimitUnit_MINUTE, 0))
	want := map[string]float64{
		"m m.a ok": 1, "m m.a over_limit": 1, "m m.u unlimited": 1, "m  no_match": 1,
		"m m.s ok": 1, "m m.s shadow_over_limit": 1, "m m.r replaced": 1, "m m.n ok": 1,
		"m override ok": 1,
	}
	check := func() {
		t.Helper()
		got := descriptorCounts(t, reg)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("descriptor counters\n got %v\nwant %v", got, want)
		}
	}
	check()

	// A reload brings new *config.Rule values for the same rules.
	reloads := w.Reloads()
	writeAtomically(t, path, metricsConfig("v1"))
	poll.Until(t, 10*time.Second, "the configuration reloaded", func() bool { return w.Reloads() != reloads })
	ask(desc("a", "1"))
	ask(desc("u", "1"))
	want["m m.a over_limit"]++
	want["m m.u unlimited"]++
	check()
}
