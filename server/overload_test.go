package server

import (
	"context"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/observe"
	"github.com/sluicehq/sluice/overload"
)

// gaugeValue returns the value of the unlabelled gauge name in reg, or -1 when absent.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// TestProxyOverloadReload: a reload that leaves the overload block's limit settings as
// they were keeps its limiter (the requests in flight stay counted); a changed limit
// starts a new one; a removed block removes the limit. The gauges follow the limiter in force.
func TestProxyOverloadReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	write := func(rate, limit int) {
		content := "policies:\n  - {name: per-ip, key: ip, rate: " + itoa(int64(rate)) + ", period: hour}\n"
		if limit > 0 {
			content += "overload:\n  min_limit: " + itoa(int64(limit)) + "\n  max_limit: " + itoa(int64(limit)) + "\n  max_wait: off\n"
		}
		writeAtomically(t, path, content)
	}
	write(10, 3)
	w, err := config.NewWatcher(path, config.WithDebounce(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	up := newUpstream(t)
	target, _ := url.Parse(up.URL)
	reg := prometheus.NewRegistry()
	p, err := NewProxy(ProxyOptions{Limiter: memoryStack(t, w.Config()).Limiter(), Upstream: target, Watcher: w, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	current := func() *overloadLimit {
		t.Helper()
		if _, err := p.handler(); err != nil {
			t.Fatal(err)
		}
		return p.cur.Load().ovl
	}
	reload := func(rate, limit int) {
		t.Helper()
		write(rate, limit)
		if err := w.Reload(); err != nil {
			t.Fatal(err)
		}
	}

	first := current()
	if first == nil {
		t.Fatal("no overload limit from the block")
	}
	held, err := first.lim.Acquire(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Drop()
	if v := gaugeValue(t, reg, observe.MetricOverloadLimit); v != 3 {
		t.Errorf("%s = %v, want 3", observe.MetricOverloadLimit, v)
	}

	reload(20, 3) // the policies change, the block does not
	if got := current(); got.lim != first.lim || got.lim.Stats().InFlight != 1 {
		t.Fatalf("an unchanged block got a new limiter (%p, was %p)", got.lim, first.lim)
	}
	if v := gaugeValue(t, reg, observe.MetricOverloadInFlight); v != 1 {
		t.Errorf("%s = %v, want 1", observe.MetricOverloadInFlight, v)
	}

	reload(20, 5)
	second := current()
	if second == nil || second.lim == first.lim || second.lim.Stats() != (overload.Stats{Limit: 5}) {
		t.Fatalf("a changed block: %+v", second)
	}
	if v := gaugeValue(t, reg, observe.MetricOverloadLimit); v != 5 {
		t.Errorf("%s = %v, want 5", observe.MetricOverloadLimit, v)
	}

	reload(20, 0)
	if got := current(); got != nil {
		t.Fatalf("a removed block left a limit: %+v", got)
	}
	if v := gaugeValue(t, reg, observe.MetricOverloadLimit); v != -1 {
		t.Errorf("%s = %v without a block, want absent", observe.MetricOverloadLimit, v)
	}
}

// PoliciesFor carries each policy's and route's criticality to its middleware policy.
func TestPoliciesForCriticality(t *testing.T) {
	cfg, err := config.Parse(config.File{Name: "p.yaml", Data: []byte(`policies:
  - name: api
    rate: 10
    period: 1s
    criticality: default
    routes:
      "POST /pay": {rate: 1, period: 1s, criticality: critical}
      "GET /report": {rate: 1, period: 1s}
  - {name: plain, rate: 10, period: 1s}
`)})
	if err != nil {
		t.Fatal(err)
	}
	policies, _, err := PoliciesFor(cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"api": "default", RouteLimitName("api", "POST /pay"): "critical",
		RouteLimitName("api", "GET /report"): "none", "plain": "none",
	}
	for _, p := range policies {
		got := "none"
		if p.Criticality != nil {
			got = p.Criticality.String()
		}
		if got != want[p.Name] {
			t.Errorf("%s: criticality %s, want %s", p.Name, got, want[p.Name])
		}
	}
	if len(policies) != len(want) {
		t.Errorf("%d policies, want %d", len(policies), len(want))
	}
}
