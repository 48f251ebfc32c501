package sim

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's chromium, failing the test with how to install it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	const p = "/usr/bin/chromium"
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the report test needs headless Chromium and %s is missing: run `apt-get install chromium` (Debian's package) or `make deps`", p)
	}
	return p
}

func TestReportIsSelfContained(t *testing.T) {
	var b bytes.Buffer
	if err := smallReport(t).WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	for _, banned := range []string{"<script", "http://", "https://", "@import", "@font-face", "<link rel=\"stylesheet\"", "<img"} {
		if strings.Contains(html, banned) {
			t.Errorf("the report contains %q: it must be self-contained", banned)
		}
	}
	if !strings.Contains(html, "Cloudflare (published)") || !strings.Contains(html, pct(CloudflareWrongRate)) {
		t.Error("the report lacks the Cloudflare comparison")
	}
}

// TestReportLeadsWithResults: the report opens with the headline chart (one bar per
// run, its ratio in data-ratio), then the summary table, then the discussion, then the
// per-pattern charts.
func TestReportLeadsWithResults(t *testing.T) {
	r := smallReport(t)
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	html := b.String()
	last := -1
	for _, mark := range []string{`id="headline-chart"`, `id="summary-table"`, `id="cloudflare-comparison"`, `class="pattern"`} {
		i := strings.Index(html, mark)
		if i < 0 {
			t.Fatalf("the report has no %s", mark)
		}
		if i < last {
			t.Errorf("%s comes before what should precede it", mark)
		}
		last = i
	}
	if i := strings.Index(html, "<svg"); i != strings.Index(html, `<svg class="headline"`) {
		t.Error("the first chart of the report is not the headline chart")
	}
	bars := regexp.MustCompile(`<rect class="bar alg-\d+"[^>]* data-pattern="([^"]+)" data-algorithm="([^"]+)" data-ratio="([^"]+)"`).FindAllStringSubmatch(html, -1)
	if len(bars) != len(r.Results) {
		t.Fatalf("headline chart has %d bars, want one per run (%d)", len(bars), len(r.Results))
	}
	for i, x := range r.Results {
		if want := []string{x.Pattern, x.Algorithm.String(), fmt.Sprintf("%.3f", x.MaxWindowRatio)}; bars[i][1] != want[0] || bars[i][2] != want[1] || bars[i][3] != want[2] {
			t.Errorf("headline bar %d is %v, want %v", i, bars[i][1:], want)
		}
	}
}

// chromiumPage opens the HTML file at path in headless Chromium at a laptop's window
// size, waits until #summary-table shows, and calls measure with the browser's context.
// It checks the screenshot of the whole page that it takes first, and returns the
// console's errors, collected from before the page loaded until measure returned.
func chromiumPage(t *testing.T, path string, measure func(ctx context.Context)) (consoleErrors []string) {
	t.Helper()
	exe := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a bound for a loaded machine; it takes seconds
	defer cancel()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.WindowSize(1366, 900), // a laptop screen
	)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()

	// Subscribe to the console (calls, uncaught exceptions, browser log entries such as a
	// failed resource load) before the page loads, and collect until the checks are done.
	msgCtx, stopMessages := context.WithCancel(bctx)
	messages := chromedp.Console(msgCtx)
	collected := make(chan struct{})
	go func() {
		defer close(collected)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				consoleErrors = append(consoleErrors, m.String())
			}
		}
	}()
	if err := chromedp.Do(bctx,
		chromedp.Navigate("file://"+path),
		chromedp.WaitVisible(chromedp.CSS("#summary-table")),
	); err != nil {
		t.Fatalf("loading the report in chromium: %v", err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(80))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	measure(bctx)
	stopMessages()
	<-collected

	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		// FullScreenshot with a quality below 100 returns JPEG.
		if !bytes.HasPrefix(shot, []byte{0xff, 0xd8}) {
			t.Fatalf("screenshot is neither PNG nor JPEG (%d bytes): %v", len(shot), err)
		}
	} else if img.Bounds().Dx() < 1000 {
		t.Errorf("screenshot %v wide, want the laptop width", img.Bounds())
	}
	if len(shot) < 50_000 {
		t.Errorf("screenshot of %d bytes: the page looks empty", len(shot))
	}
	os.WriteFile(filepath.Join(filepath.Dir(path), "report.jpg"), shot, 0o644)
	return consoleErrors
}

// writeFile writes a report with write to a file of a new temporary directory and
// returns its path.
func writeFile(t *testing.T, write func(io.Writer) error) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := write(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReportRendersInChromium opens the report in headless Chromium, takes a screenshot,
// and checks that every chart rendered its series with a non-zero size and that the
// console stayed free of errors.
func TestReportRendersInChromium(t *testing.T) {
	r := smallReport(t)
	path := writeFile(t, r.WriteHTML)

	type series struct {
		Present bool    `json:"present"`
		W       float64 `json:"w"`
		H       float64 `json:"h"`
	}
	type chart struct {
		Pattern   string            `json:"pattern"`
		Algorithm string            `json:"algorithm"`
		W         float64           `json:"w"`
		H         float64           `json:"h"`
		Series    map[string]series `json:"series"`
	}
	const measureCharts = `Array.from(document.querySelectorAll('svg.chart')).map(svg => {
		const r = svg.getBoundingClientRect();
		const series = {};
		for (const name of ['admitted', 'denied', 'window', 'limit']) {
			const el = svg.querySelector('.series.' + name);
			const b = el ? el.getBBox() : {width: 0, height: 0};
			series[name] = {present: !!el, w: b.width, h: b.height};
		}
		return {pattern: svg.dataset.pattern, algorithm: svg.dataset.algorithm, w: r.width, h: r.height, series};
	})`
	type bar struct {
		Ratio float64 `json:"ratio"`
		W     float64 `json:"w"`
		H     float64 `json:"h"`
	}
	type headline struct {
		First    bool    `json:"first"`    // the page's first chart
		Top      float64 `json:"top"`      // px from the top of the page
		Viewport float64 `json:"viewport"` // the window's height
		W        float64 `json:"w"`
		Order    bool    `json:"order"` // headline, summary table, discussion, pattern charts
		Bars     []bar   `json:"bars"`
	}
	const measureHeadline = `(() => {
		const h = document.getElementById('headline-chart');
		const after = (a, b) => !!(a && b && (a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING));
		const seq = [h, document.getElementById('summary-table'), document.getElementById('cloudflare-comparison'), document.querySelector('svg.chart')];
		return {
			first: document.querySelector('svg') === h,
			top: h.getBoundingClientRect().top + window.scrollY,
			viewport: window.innerHeight,
			w: h.getBoundingClientRect().width,
			order: seq.every((el, i) => i === 0 || after(seq[i-1], el)),
			bars: Array.from(h.querySelectorAll('rect.bar')).map(b => {
				const r = b.getBoundingClientRect();
				return {ratio: parseFloat(b.dataset.ratio), w: r.width, h: r.height};
			}),
		};
	})()`
	var charts []chart
	var tableRows int
	var head headline
	consoleErrors := chromiumPage(t, path, func(bctx context.Context) {
		var err error
		if charts, err = chromedp.Run(bctx, chromedp.Evaluate[[]chart](measureCharts)); err != nil {
			t.Fatalf("measuring the charts: %v", err)
		}
		if tableRows, err = chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#summary-table tr').length`)); err != nil {
			t.Fatal(err)
		}
		if head, err = chromedp.Run(bctx, chromedp.Evaluate[headline](measureHeadline)); err != nil {
			t.Fatalf("measuring the headline chart: %v", err)
		}
	})

	if !head.First || !head.Order {
		t.Errorf("headline chart first %v, order headline < summary < discussion < pattern charts %v", head.First, head.Order)
	}
	if head.Top+200 > head.Viewport || head.W < 1000 {
		t.Errorf("headline chart at %.0f px from the top, %.0f px wide: want it on the first screen (%.0f px), across the page", head.Top, head.W, head.Viewport)
	}
	if len(head.Bars) != len(r.Results) {
		t.Errorf("headline chart rendered %d bars, want one per run (%d)", len(head.Bars), len(r.Results))
	}
	for i, b := range head.Bars {
		// Heights are proportional to the ratio: the same pixels per 1.0× for every bar.
		if b.W <= 0 || b.H <= 0 || math.Abs(b.H/b.Ratio-head.Bars[0].H/head.Bars[0].Ratio) > 1 {
			t.Errorf("headline bar %d (%s/%s, %.3f×) rendered %.1f×%.1f px, out of proportion with bar 0 (%.3f×, %.1f px)",
				i, r.Results[i].Pattern, r.Results[i].Algorithm, b.Ratio, b.W, b.H, head.Bars[0].Ratio, head.Bars[0].H)
		}
	}
	if want := len(r.Results) + 1; tableRows != want {
		t.Errorf("summary table has %d rows, want %d", tableRows, want)
	}
	if len(charts) != len(r.Results) {
		t.Fatalf("%d charts rendered, want one per result (%d)", len(charts), len(r.Results))
	}
	for i, c := range charts {
		x := r.Results[i]
		name := x.Pattern + "/" + x.Algorithm.String()
		if c.Pattern != x.Pattern || c.Algorithm != x.Algorithm.String() {
			t.Errorf("chart %d is %s/%s, want %s", i, c.Pattern, c.Algorithm, name)
		}
		if c.W < 300 || c.H < 150 {
			t.Errorf("%s: chart is %.0f×%.0f px, too small to read", name, c.W, c.H)
		}
		for s, v := range c.Series {
			if !v.Present {
				t.Errorf("%s: series %s missing", name, s)
			}
		}
		// Each series with data has a size; an empty one (no denials) has none.
		for s, has := range map[string]bool{
			"admitted": sum(x.Timeline.Admitted) > 0,
			"denied":   sum(x.Timeline.Denied) > 0,
			"window":   true,
			"limit":    true,
		} {
			v := c.Series[s]
			switch {
			case has && s == "limit" && v.W <= 0:
				t.Errorf("%s: limit line has no width", name)
			case has && s != "limit" && (v.W <= 0 || v.H <= 0):
				t.Errorf("%s: series %s rendered %.1f×%.1f", name, s, v.W, v.H)
			case !has && (v.W > 0 || v.H > 0):
				t.Errorf("%s: series %s drawn without data", name, s)
			}
		}
	}
	if len(consoleErrors) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(consoleErrors, "\n"))
	}
}

// TestChartSeriesFollowTheTimeline checks the SVG against the data it draws: one bar per
// non-empty bin, and a window line that reaches the peak the result reports.
func TestChartSeriesFollowTheTimeline(t *testing.T) {
	r := smallReport(t)
	x := result(t, r, "boundary", 3) // fixed_window
	var p Pattern
	for _, q := range r.Patterns {
		if q.Name == "boundary" {
			p = q
		}
	}
	svg := string(chartSVG(p, x, chartScale([]Result{x})))
	d := regexp.MustCompile(`class="series admitted" d="([^"]*)"`).FindStringSubmatch(svg)
	if d == nil {
		t.Fatal("no admitted series")
	}
	nonEmpty := 0
	for _, v := range x.Timeline.Admitted {
		if v > 0 {
			nonEmpty++
		}
	}
	if got := strings.Count(d[1], "M"); got != nonEmpty {
		t.Errorf("%d admitted bars, want %d (non-empty bins)", got, nonEmpty)
	}
	if maxOf(x.Timeline.Window) != 2*x.Timeline.Rate {
		t.Errorf("timeline peak %d, want 2×%d as max_window_ratio says", maxOf(x.Timeline.Window), x.Timeline.Rate)
	}
	// The window panel's top is 2·Rate, so the peak touches it.
	if !strings.Contains(svg, fmt.Sprintf("V%.2f", float64(windowTop))) {
		t.Errorf("window line never reaches the top of its panel (2× the limit)")
	}
}
