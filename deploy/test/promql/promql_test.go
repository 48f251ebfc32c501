package promql

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/deploy/test/internal/sluicetest"
)

// targetLabels are the labels Prometheus adds to every series it scrapes, so an
// expression may use them although sluice does not export them.
var targetLabels = []string{"job", "instance"}

// redisOnly are the metrics only a sluice on Redis exports: the in-memory store cannot
// fail, so it has no failover decorator (fallbacks, store errors), no Redis to poll for
// evicted keys and no Redis settings to be refused. TestPromQL holds this list to what each store exports.
var redisOnly = []string{
	"sluice_fallback_decisions_total",
	"sluice_redis_evicted_keys_total",
	"sluice_store_errors_total",
	"sluice_store_misconfigured",
}

// grafanaVars are values for the Grafana variables the dashboard's expressions use, so
// that Prometheus's parser can read them.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$job", ".*", "$instance", ".*")

// promExpr is one PromQL expression and where it comes from.
type promExpr struct {
	where string
	expr  string
}

// dashboardExprs returns every PromQL expression of the Grafana dashboard: each panel's
// targets (rows' panels included), and the metric selectors of its label_values
// variables with the label they read.
func dashboardExprs(t *testing.T, path string) (exprs []promExpr, labelValues map[string]string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels     []json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var walk func([]json.RawMessage)
	walk = func(ps []json.RawMessage) {
		for _, r := range ps {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for i, tg := range p.Targets {
				exprs = append(exprs, promExpr{fmt.Sprintf("%s: panel %q, target %d", filepath.Base(path), p.Title, i), grafanaVars.Replace(tg.Expr)})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	labelValues = map[string]string{}
	lv := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)["query"].(string)
		m := lv.FindStringSubmatch(q)
		if m == nil {
			t.Fatalf("%s: variable %s: query %q is not label_values(SELECTOR, LABEL)", path, v.Name, q)
		}
		where := fmt.Sprintf("%s: variable %s", filepath.Base(path), v.Name)
		exprs = append(exprs, promExpr{where, grafanaVars.Replace(m[1])})
		labelValues[where] = m[2]
	}
	return exprs, labelValues
}

// alertExprs parses the alert rules with Prometheus's rule file parser (which also
// parses each expression and checks templates) and returns their expressions.
func alertExprs(t *testing.T, path string) []promExpr {
	t.Helper()
	groups, errs := rulefmt.ParseFile(path, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("%v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	var exprs []promExpr
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, promExpr{fmt.Sprintf("%s: %s", filepath.Base(path), r.Alert), r.Expr})
		}
	}
	return exprs
}

// exported maps each series name of a /metrics page to the label names of its series
// (a histogram's _bucket, _sum and _count included).
func exported(t *testing.T, page string) map[string][]string {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	out := map[string][]string{}
	add := func(name string, labels []string) {
		for _, l := range labels {
			if !slices.Contains(out[name], l) {
				out[name] = append(out[name], l)
			}
		}
		if out[name] == nil {
			out[name] = []string{}
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName())
			}
			if f.GetType() == dto.MetricType_HISTOGRAM {
				add(name+"_bucket", append(slices.Clone(ls), "le"))
				add(name+"_sum", ls)
				add(name+"_count", ls)
			} else {
				add(name, ls)
			}
		}
	}
	return out
}

// uses is what one expression needs of the exported metrics: for each metric it
// names, the labels it matches on or groups by.
func uses(t *testing.T, e promExpr) map[string][]string {
	t.Helper()
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(e.expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", e.where, e.expr, err)
		return nil
	}
	need := map[string][]string{}
	addLabel := func(metric, label string) {
		if !slices.Contains(need[metric], label) {
			need[metric] = append(need[metric], label)
		}
	}
	// selected returns the metric names an expression selects.
	selected := func(n parser.Node) []string {
		var names []string
		parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" {
				names = append(names, vs.Name)
			}
			return nil
		})
		return names
	}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			if n.Name == "" {
				t.Errorf("%s: a selector without a metric name: %s", e.where, n)
				return nil
			}
			if need[n.Name] == nil {
				need[n.Name] = []string{}
			}
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel {
					addLabel(n.Name, m.Name)
				}
			}
		case *parser.AggregateExpr:
			for _, metric := range selected(n.Expr) {
				for _, l := range n.Grouping {
					addLabel(metric, l)
				}
			}
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil {
				for _, side := range []parser.Node{n.LHS, n.RHS} {
					for _, metric := range selected(side) {
						for _, l := range append(slices.Clone(vm.MatchingLabels), vm.Include...) {
							addLabel(metric, l)
						}
					}
				}
			}
		}
		return nil
	})
	return need
}

// TestPromQL: every PromQL expression of deploy/grafana/sluice.json and
// deploy/prometheus/alerts.yaml parses with Prometheus's own parser, and every metric it
// names is exported by a running `sluice serve`, or `sluice proxy` with an overload
// block (the overload series), on Redis and (but for redisOnly) on memory, with every
// label it matches on or groups by (or a label Prometheus adds).
func TestPromQL(t *testing.T) {
	exprs, labelValues := dashboardExprs(t, filepath.Join("..", "..", "grafana", "sluice.json"))
	if len(exprs) < 15 {
		t.Fatalf("the dashboard has %d expressions; expected its panels' and variables'", len(exprs))
	}
	exprs = append(exprs, alertExprs(t, filepath.Join("..", "..", "prometheus", "alerts.yaml"))...)
	needs := map[string]map[string][]string{} // where -> metric -> labels
	for _, e := range exprs {
		needs[e.where] = uses(t, e)
	}
	for where, label := range labelValues {
		for metric := range needs[where] {
			needs[where][metric] = append(needs[where][metric], label)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			have := exercised(t, store)
			for _, where := range sortedKeys(needs) {
				for _, metric := range sortedKeys(needs[where]) {
					labels, ok := have[metric]
					switch {
					case store == "memory" && slices.Contains(redisOnly, metric):
						if ok {
							t.Errorf("%s is in redisOnly, but sluice on memory exports it", metric)
						}
						continue
					case !ok:
						t.Errorf("%s: sluice serve on %s does not export %s", where, store, metric)
						continue
					}
					for _, l := range needs[where][metric] {
						if !slices.Contains(labels, l) && !slices.Contains(targetLabels, l) {
							t.Errorf("%s: %s has no label %q (it has %v)", where, metric, l, labels)
						}
					}
				}
			}
			for _, metric := range redisOnly {
				if _, ok := have[metric]; store == "redis" && !ok {
					t.Errorf("sluice serve on Redis does not export %s (redisOnly)", metric)
				}
			}
		})
	}
}

// exercised runs `sluice serve` on store (memory or redis) with the Envoy example's
// domain and a policy, makes it decide as production does (allowed, denied, denials
// the deny cache repeats, Envoy descriptors; on Redis also decisions while Redis is
// frozen, which the failure mode makes), runs `sluice proxy` with an overload block
// beside it, and returns what serve's /metrics exports with the proxy's overload series.
func exercised(t *testing.T, store string) map[string][]string {
	dir := t.TempDir()
	edge, err := os.ReadFile(filepath.Join("..", "..", "envoy", "sluice", "edge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "edge.yaml"), edge, 0o644)
	os.WriteFile(filepath.Join(dir, "policies.yaml"), []byte("policies:\n  - {name: p, algorithm: gcra, rate: 2, period: minute, key: ip}\n"), 0o644)
	args := []string{"--config", dir}
	var redis *sluicetest.Redis
	if store == "redis" {
		redis = sluicetest.StartRedis(t)
		args = append(args, "--redis", redis.URL(), "--failure-mode", "local", "--deadline", "20ms")
	}
	s := sluicetest.StartServe(t, sluiceBin, args...)

	denied := false
	for i := 0; i < 10 && !denied; i++ {
		denied = s.Check(t, `{"policy":"p","key":"203.0.113.1"}`) == 429
	}
	if !denied {
		t.Fatal("policy p (2 per minute) never denied")
	}
	s.Check(t, `{"policy":"p","key":"203.0.113.1"}`) // the deny cache repeats the denial

	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain:      "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.1"}}}},
	})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}

	// A rejected reload: the watcher keeps the old configuration and counts it.
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: bad\ndescriptors: [{key: k, rate_limit: {unit: eon, requests_per_unit: 1}}]\n"), 0o644)
	s.Cmd.Process.Signal(syscall.SIGHUP)
	waitFor(t, "a rejected reload", func() bool { return strings.Contains(s.Metrics(t), "sluice_config_reload_rejected_total 1") })

	// The overload series: `sluice proxy` with an overload block, on the same store,
	// exports them (the gauges, and the counters by criticality from the start).
	proxyCfg := filepath.Join(t.TempDir(), "overload.yaml")
	os.WriteFile(proxyCfg, []byte("overload: {max_limit: 50}\npolicies:\n  - {name: p, rate: 2, period: minute, key: ip}\n"), 0o644)
	proxyArgs := []string{"--upstream", "http://127.0.0.1:1", "--config", proxyCfg}
	if redis != nil {
		proxyArgs = append(proxyArgs, "--redis", redis.URL())
	}
	proxied := exported(t, sluicetest.StartProxy(t, sluiceBin, proxyArgs...).Metrics(t))
	for _, name := range overloadSeries {
		if _, ok := proxied[name]; !ok {
			t.Errorf("sluice proxy with an overload block does not export %s", name)
		}
	}

	if redis != nil {
		redis.Pause()
		for i := range 10 {
			s.Check(t, fmt.Sprintf(`{"policy":"p","key":"198.51.100.%d"}`, i))
		}
		redis.Resume()
		waitFor(t, "decisions by the local failure mode", func() bool {
			return strings.Contains(s.Metrics(t), `sluice_fallback_decisions_total{mode="local"`)
		})
	}
	have := exported(t, s.Metrics(t))
	for _, name := range overloadSeries {
		have[name] = proxied[name]
	}
	return have
}

// overloadSeries are the metrics only `sluice proxy` with an overload block exports.
var overloadSeries = []string{
	"sluice_overload_limit", "sluice_overload_inflight", "sluice_overload_queued",
	"sluice_overload_admitted_total", "sluice_overload_shed_total",
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// sluiceBin is the sluice binary TestMain builds from the main module.
var sluiceBin string

func TestMain(m *testing.M) { sluicetest.Main(m, filepath.Join("..", "..", ".."), &sluiceBin) }
