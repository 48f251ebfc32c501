package sim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

var (
	overloadOnce    sync.Once
	overloadResults map[string]*OverloadReport
	overloadErr     error
)

// overloadReports runs the default scenario with half of every step critical ("half")
// and with critical arrivals capped at half the capacity ("capped"), once for the tests
// that only read them.
func overloadReports(t *testing.T) map[string]*OverloadReport {
	t.Helper()
	overloadOnce.Do(func() {
		overloadResults = map[string]*OverloadReport{}
		for name, critMax := range map[string]float64{"half": 0, "capped": 0.5} {
			c := DefaultOverload()
			c.CriticalMax = critMax
			r, err := RunOverload(context.Background(), c)
			if err != nil {
				overloadErr = err
				return
			}
			overloadResults[name] = r
		}
	})
	if overloadErr != nil {
		t.Fatal(overloadErr)
	}
	return overloadResults
}

// phase returns the protection's result in the named phase.
func phase(t *testing.T, r *OverloadReport, protection, name string) PhaseResult {
	t.Helper()
	for _, run := range r.Runs {
		if run.Protection != protection {
			continue
		}
		for _, p := range run.Phases {
			if p.Name == name {
				return p
			}
		}
	}
	t.Fatalf("no phase %s for %s", name, protection)
	return PhaseResult{}
}

func run(t *testing.T, r *OverloadReport, protection string) OverloadRun {
	t.Helper()
	for _, x := range r.Runs {
		if x.Protection == protection {
			return x
		}
	}
	t.Fatalf("no run of %s", protection)
	return OverloadRun{}
}

// TestOverloadSameSeedSameReport: two runs of a seed give byte-identical table, JSON,
// CSV and HTML; another seed gives another load.
func TestOverloadSameSeedSameReport(t *testing.T) {
	render := func(seed uint64) map[string][]byte {
		c := DefaultOverload()
		c.Seed = seed
		c.Step, c.Slow = 2*time.Second, 4*time.Second
		r, err := RunOverload(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]byte{}
		for name, w := range map[string]func(io.Writer) error{
			"table": r.WriteTable, "json": r.WriteJSON, "csv": r.WriteCSV, "html": r.WriteHTML,
		} {
			var b bytes.Buffer
			if err := w(&b); err != nil {
				t.Fatal(err)
			}
			out[name] = b.Bytes()
		}
		return out
	}
	a, b := render(42), render(42)
	for name := range a {
		if !bytes.Equal(a[name], b[name]) {
			t.Errorf("%s differs between two runs with seed 42", name)
		}
	}
	if c := render(43); bytes.Equal(a["json"], c["json"]) {
		t.Error("seeds 42 and 43 gave the same JSON")
	}
}

// TestOverloadProtectsCritical: at 4× the capacity, sluice's critical requests succeed
// more often than under no protection or a fixed limit; with critical arrivals capped
// at half the capacity, at least 99% of them succeed, with a goodput of at least 90% of
// the capacity, while the unprotected upstream collapses (under 10%).
func TestOverloadProtectsCritical(t *testing.T) {
	rs := overloadReports(t)
	half := rs["half"]
	sl, fx, none := phase(t, half, "sluice", "4×"), phase(t, half, "fixed", "4×"), phase(t, half, "none", "4×")
	if sl.Critical.Success <= fx.Critical.Success || sl.Critical.Success <= none.Critical.Success {
		t.Errorf("half critical at 4×: critical success sluice %s, fixed %s, none %s; want sluice's the highest",
			pct(sl.Critical.Success), pct(fx.Critical.Success), pct(none.Critical.Success))
	}
	capped := rs["capped"]
	sl, none = phase(t, capped, "sluice", "4×"), phase(t, capped, "none", "4×")
	if sl.Critical.Success < 0.99 || sl.Share < 0.9 {
		t.Errorf("capped critical at 4×: sluice's critical success %s, goodput %s of capacity; want ≥ 99%% and ≥ 90%%",
			pct(sl.Critical.Success), pct(sl.Share))
	}
	if none.Share >= 0.1 {
		t.Errorf("capped critical at 4×: the unprotected goodput is %s of capacity; want the collapse (< 10%%)", pct(none.Share))
	}
}

// TestOverloadShedsSheddableFirst: sluice sheds a larger share of sheddable requests than
// of critical ones in every phase, and sheds sheddable requests in an earlier phase than
// the first in which it sheds any critical one. The fixed limit, which knows no classes,
// sheds both alike.
func TestOverloadShedsSheddableFirst(t *testing.T) {
	for name, r := range overloadReports(t) {
		firstShed, firstCrit := -1, -1
		for i, p := range run(t, r, "sluice").Phases {
			c, s := p.Critical, p.Sheddable
			cShare, sShare := float64(c.Shed)/float64(c.Offered), float64(s.Shed)/float64(s.Offered)
			if c.Shed > 0 && cShare >= sShare {
				t.Errorf("%s, %s: sluice shed %s of critical requests and %s of sheddable ones", name, p.Name, pct(cShare), pct(sShare))
			}
			if s.Shed > 0 && firstShed < 0 {
				firstShed = i
			}
			if c.Shed > 0 && firstCrit < 0 {
				firstCrit = i
			}
		}
		if firstShed < 0 || firstCrit >= 0 && firstCrit <= firstShed {
			t.Errorf("%s: sluice first shed sheddable requests in phase %d, critical ones in %d; want sheddable strictly first", name, firstShed, firstCrit)
		}
		fx := phase(t, r, "fixed", "4×")
		if c, s := fx.Critical, fx.Sheddable; c.Shed == 0 || s.Shed == 0 {
			t.Errorf("%s: the fixed limit shed %d critical and %d sheddable requests at 4×; want both", name, c.Shed, s.Shed)
		}
	}
}

// TestOverloadLimitFallsAfterSlowdown: once the upstream halves its speed, sluice's limit
// over the second half of the slow phase is below four fifths of its mean at 4× at full
// speed; the fixed limit stays where it is, and no protection has none.
func TestOverloadLimitFallsAfterSlowdown(t *testing.T) {
	r := overloadReports(t)["half"]
	var slowAt, end time.Duration
	for _, p := range r.Phases {
		if p.Slow {
			slowAt = end
		}
		end += p.Duration
	}
	before := phase(t, r, "sluice", "4×").LimitMean
	var sum, n int
	for _, s := range run(t, r, "sluice").Samples {
		if s.At >= slowAt+(end-slowAt)/2 {
			sum += s.Limit
			n++
		}
	}
	after := float64(sum) / float64(n)
	if n == 0 || after >= 0.8*before {
		t.Errorf("sluice's limit: %.1f at 4×, %.1f over the second half at half speed (%d samples); want a fall below 80%%", before, after, n)
	}
	if p := phase(t, r, "fixed", "4× slow"); p.LimitMin != 16 || p.LimitMax != 16 {
		t.Errorf("fixed limit at half speed: %d–%d, want 16", p.LimitMin, p.LimitMax)
	}
	if p := phase(t, r, "none", "4× slow"); p.LimitMax != 0 {
		t.Errorf("no protection reported a limit of %d", p.LimitMax)
	}
}

// TestOverloadCountsEveryRequest: every request due in a phase ends one way, the same
// number of requests meets each protection, and goodput is what was answered.
func TestOverloadCountsEveryRequest(t *testing.T) {
	r := overloadReports(t)["half"]
	for i := range r.Phases {
		var offered []int
		for _, x := range r.Runs {
			p := x.Phases[i]
			for _, c := range []ClassResult{p.Critical, p.Sheddable} {
				if c.OK+c.Shed+c.Rejected+c.TimedOut != c.Offered {
					t.Errorf("%s, %s: %+v does not add up", x.Protection, p.Name, c)
				}
			}
			offered = append(offered, p.Critical.Offered+p.Sheddable.Offered)
		}
		for _, o := range offered[1:] {
			if o != offered[0] {
				t.Errorf("phase %s: offered %v, want the same arrivals for every protection", r.Phases[i].Name, offered)
			}
		}
	}
	for _, x := range r.Runs {
		var ok, seconds int64
		for _, p := range x.Phases {
			ok += int64(p.Critical.OK + p.Sheddable.OK)
		}
		for _, s := range x.Seconds {
			seconds += s.CriticalOK + s.SheddableOK
		}
		if seconds > ok {
			t.Errorf("%s: %d successes by second, more than the %d counted by phase", x.Protection, seconds, ok)
		}
	}
}

func TestOverloadBadConfig(t *testing.T) {
	for name, edit := range map[string]func(*OverloadConfig){
		"no workers":         func(c *OverloadConfig) { c.Workers = 0 },
		"no steps":           func(c *OverloadConfig) { c.Steps = nil },
		"negative step":      func(c *OverloadConfig) { c.Steps = []float64{1, -2} },
		"unknown protection": func(c *OverloadConfig) { c.Protections = []string{"sluice", "magic"} },
		"bad limiter":        func(c *OverloadConfig) { c.Limiter.MinLimit = -1 },
		"no timeout":         func(c *OverloadConfig) { c.Timeout = 0 },
		"too many requests":  func(c *OverloadConfig) { c.Step = 23 * time.Hour },
	} {
		c := DefaultOverload()
		edit(&c)
		if _, err := RunOverload(context.Background(), c); !errors.Is(err, ErrUsage) {
			t.Errorf("%s: err = %v, want ErrUsage", name, err)
		}
	}
}

// TestOverloadReportRendersInChromium opens the overload report in headless Chromium,
// as TestReportRendersInChromium does the rate report: one chart per protection whose
// successes and in-flight series have a size, a limit line for the protections that
// have one, the summary table with a row per protection and phase, and no console
// errors.
func TestOverloadReportRendersInChromium(t *testing.T) {
	r := overloadReports(t)["half"]
	path := writeFile(t, r.WriteHTML)
	type box struct {
		Present bool    `json:"present"`
		W       float64 `json:"w"`
		H       float64 `json:"h"`
	}
	type chart struct {
		Protection string         `json:"protection"`
		W          float64        `json:"w"`
		H          float64        `json:"h"`
		Series     map[string]box `json:"series"`
	}
	const measure = `Array.from(document.querySelectorAll('svg.chart')).map(svg => {
		const r = svg.getBoundingClientRect();
		const series = {};
		for (const name of ['critical', 'sheddable', 'inflight', 'queued', 'limit', 'capacity']) {
			const el = svg.querySelector('.series.' + name);
			const b = el ? el.getBBox() : {width: 0, height: 0};
			series[name] = {present: !!el, w: b.width, h: b.height};
		}
		return {protection: svg.dataset.protection, w: r.width, h: r.height, series};
	})`
	var charts []chart
	var rows int
	consoleErrors := chromiumPage(t, path, func(ctx context.Context) {
		var err error
		if charts, err = chromedp.Run(ctx, chromedp.Evaluate[[]chart](measure)); err != nil {
			t.Fatalf("measuring the charts: %v", err)
		}
		if rows, err = chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#summary-table tr').length`)); err != nil {
			t.Fatal(err)
		}
	})
	if len(charts) != len(r.Runs) {
		t.Fatalf("%d charts rendered, want one per protection (%d)", len(charts), len(r.Runs))
	}
	for i, c := range charts {
		x := r.Runs[i]
		if c.Protection != x.Protection {
			t.Errorf("chart %d is of %q, want %q", i, c.Protection, x.Protection)
		}
		if c.W < 300 || c.H < 150 {
			t.Errorf("%s: chart is %.0f×%.0f px, too small to read", x.Protection, c.W, c.H)
		}
		for name, s := range c.Series {
			want := name != "limit" || x.Protection != "none"
			switch {
			case s.Present != want:
				t.Errorf("%s: series %s present %v, want %v", x.Protection, name, s.Present, want)
			case want && name == "capacity" && s.W <= 0:
				t.Errorf("%s: the capacity line has no width", x.Protection)
			case want && name != "capacity" && (s.W <= 0 || s.H <= 0):
				t.Errorf("%s: series %s rendered %.1f×%.1f", x.Protection, name, s.W, s.H)
			}
		}
	}
	if want := len(r.Runs)*len(r.Phases) + 1; rows != want {
		t.Errorf("summary table has %d rows, want %d", rows, want)
	}
	if len(consoleErrors) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(consoleErrors, "\n"))
	}
}

// TestOverloadCLI: the formats, the HTML report, and the options RunOverloadCLI cannot
// take, which are usage errors returned before anything runs.
func TestOverloadCLI(t *testing.T) {
	base := func() OverloadCLI {
		c := DefaultOverload()
		c.Fixed = 0 // the CLI's "0: --workers"
		c.Step, c.Slow = time.Second, 2*time.Second
		return OverloadCLI{Scenario: c, Steps: "1,4", Protections: "all", Format: "table"}
	}
	path := filepath.Join(t.TempDir(), "overload.html")
	o := base()
	o.Out = path
	var out bytes.Buffer
	if err := RunOverloadCLI(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^ +sluice +1× `).MatchString(out.String()) || !strings.Contains(out.String(), "fixed limit 16") {
		t.Errorf("table:\n%s", out.String())
	}
	html, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(html), `<svg class="chart"`); n != 3 {
		t.Errorf("HTML report has %d charts, want 3", n)
	}
	o = base()
	o.Scenario.Limiter.Tolerance = 20
	out.Reset()
	if err := RunOverloadCLI(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); !strings.Contains(first, "sluice: Tolerance:20 ·") {
		t.Errorf("the setup line does not name the limiter's setting: %s", first)
	}
	o = base()
	o.Format, o.Protections = "csv", "sluice"
	out.Reset()
	if err := RunOverloadCLI(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[1], "sluice,1×,1,false,") {
		t.Errorf("CSV of one protection and three phases:\n%s", out.String())
	}

	for _, tc := range []struct {
		edit func(*OverloadCLI)
		want string
	}{
		{func(o *OverloadCLI) { o.Format = "xml" }, "--format"},
		{func(o *OverloadCLI) { o.Steps = "1,lots" }, `--steps: "lots" is not a load`},
		{func(o *OverloadCLI) { o.Protections = "none,adaptive" }, `unknown protection "adaptive"`},
		{func(o *OverloadCLI) { o.Scenario.Sigma = -1 }, "sigma"},
		{func(o *OverloadCLI) { o.Scenario.Limiter.CriticalReserve, o.Scenario.Limiter.DefaultReserve = 60, 60 }, "CriticalReserve"},
	} {
		o := base()
		tc.edit(&o)
		o.Out = filepath.Join(t.TempDir(), "never.html")
		err := RunOverloadCLI(context.Background(), o, io.Discard)
		if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want ErrUsage naming %q", err, tc.want)
		}
		if _, err := os.Stat(o.Out); err == nil {
			t.Errorf("%q: the report was written despite the usage error", tc.want)
		}
	}
}

// TestOverloadSettle judges the limit after the upstream halves, as bench/cmd/overload
// does: where it ends, when it came within ±Swing of that for good, and its swing after.
func TestOverloadSettle(t *testing.T) {
	// The phase before begins at 0, the upstream halves at 10 s, the run ends at 30 s.
	series := func(f func(t time.Duration) int) []OverloadSample {
		var s []OverloadSample
		for i := range 300 {
			at := time.Duration(i) * 100 * time.Millisecond
			s = append(s, OverloadSample{At: at, Limit: f(at)})
		}
		return s
	}
	for _, c := range []struct {
		name    string
		limit   func(t time.Duration) int
		settled bool
		after   time.Duration
		final   float64
	}{
		{"steps down and holds", func(t time.Duration) int {
			if t < 13*time.Second {
				return 40
			}
			return 20
		}, true, 3 * time.Second, 20},
		{"takes too long", func(t time.Duration) int {
			if t < 22*time.Second {
				return 40
			}
			return 20
		}, false, 12 * time.Second, 20},
		{"swings ±30%", func(t time.Duration) int {
			if t/time.Second%2 == 0 {
				return 13
			}
			return 10
		}, false, 19 * time.Second, 10},
		{"strays within the swing", func(t time.Duration) int {
			if t >= 20*time.Second && t < 21*time.Second {
				return 23
			}
			return 20
		}, true, 0, 20},
	} {
		st := settle(series(c.limit), 0, int64(10*time.Second), int64(30*time.Second), 10*time.Second, 100*time.Millisecond, 0.2)
		if st == nil {
			t.Fatalf("%s: nil", c.name)
		}
		if st.Settled != c.settled || st.After != c.after || st.Final != c.final || st.Before != float64(c.limit(9*time.Second)) {
			t.Errorf("%s: %+v; want settled %v after %v at %v", c.name, st, c.settled, c.after, c.final)
		}
	}
	if st := settle(series(func(time.Duration) int { return 0 }), 0, int64(10*time.Second), int64(30*time.Second), 10*time.Second, 100*time.Millisecond, 0.2); st != nil {
		t.Errorf("no limit: %+v, want nil", st)
	}
}

// TestOverloadTargets: with critical arrivals capped at half the capacity, the report
// judges issue 42's targets on each run: the unprotected upstream meets none of them and
// sluice's defaults meet every one, the limit's settling included; the table and the
// HTML report list them.
func TestOverloadTargets(t *testing.T) {
	r := overloadReports(t)["capped"]
	met := map[string][]bool{}
	for _, x := range r.Targets {
		met[x.Protection] = append(met[x.Protection], x.Met)
	}
	if got := met["none"]; len(got) != 3 || slices.Contains(got, true) {
		t.Errorf("none: targets met %v, want three, none met", got)
	}
	if got := met["sluice"]; len(got) != 4 || slices.Contains(got, false) {
		t.Errorf("sluice: targets met %v, want four, all met:\n%+v", got, r.Targets)
	}
	if st := run(t, r, "sluice").Settle; st == nil || st.Final >= st.Before || !st.Settled {
		t.Errorf("sluice's settling: %+v, want the limit lower after the slowdown, settled", st)
	}
	var table, html bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	for _, x := range r.Targets {
		line := x.Protection + " " + x.What + ": " + x.Value + " — " + x.verdict()
		if !strings.Contains(strings.Join(strings.Fields(table.String()), " "), line) {
			t.Errorf("the table lacks %q", line)
		}
	}
	_, targets, _ := strings.Cut(html.String(), `id="targets-table"`)
	if n := strings.Count(targets, `<tr data-protection=`); n != len(r.Targets) {
		t.Errorf("the HTML report has %d target rows, want %d", n, len(r.Targets))
	}
}
