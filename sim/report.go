package sim

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
)

//go:embed report.html.tmpl
var reportTemplate string

// reportCSS is the style sheet of every report.
//
//go:embed report.css
var reportCSS string

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"style": style,
	"pct":   pct,
	"dur":   humanDuration,
	"ratio": func(f float64) string { return fmt.Sprintf("%.3f×", f) },
	"bytes": bytesPerKey,
	"retry": honesty,
	"rateErr": func(p *float64) string {
		if p == nil {
			return "–"
		}
		return pct(*p)
	},
	// ratioClass grades a max_window_ratio: exact, over, or about double.
	"ratioClass": func(f float64) string {
		switch {
		case f > 1.5:
			return "bad"
		case f > 1:
			return "warn"
		}
		return "ok"
	},
	"nonzero": func(f float64) string {
		if f > 0 {
			return "warn"
		}
		return "ok"
	},
	"retryClass": func(x Result) string {
		if !x.RetryAfterHonest {
			return "bad"
		}
		return "ok"
	},
	"millions": func(n int64) string {
		if n >= 1_000_000 && n%1_000_000 == 0 {
			return fmt.Sprintf("%d million", n/1_000_000)
		}
		return thousands(n)
	},
	"thousands": thousands,
	"int64":     func(i int) int64 { return int64(i) },
	"per":       per,
	"missed":    missed,
	"share":     shareOrNone,
}).Parse(reportTemplate))

// style is the reports' style sheet, for their <style> element.
func style() template.CSS { return template.CSS(reportCSS) }

type reportView struct {
	Seed       uint64
	Store      string
	Patterns   []patternView
	Results    []Result
	Estimates  []Estimate
	Cloudflare *cloudflareView
	Headline   template.HTML
}

type patternView struct {
	Pattern
	ID       string
	LimitStr string
	Charts   []template.HTML
}

type cloudflareView struct {
	Published struct {
		Requests, Sources  int64
		WrongRate, MeanDif float64
		Missed             int
		Overshoot          float64
	}
	Population PopulationAccuracy
	Sample     Estimate // the pattern's own traffic
	SampleKeys int
	Workload   string
	EndToEnd   *Result // the sliding_window run, if any
	Reference  *Result // the sliding_log run, if any
}

// WriteHTML writes a self-contained HTML report that leads with its results: a headline
// chart of every run's max_window_ratio, the summary table, the discussion (the sliding
// window counter as an estimator, and beside Cloudflare's published accuracy on the first
// pattern with a Population), and per pattern a chart per algorithm of the charted key's
// admitted and denied requests and its rolling window count against the limit. It is all
// inline SVG and CSS (no scripts, fonts or external resources); the same report gives the
// same bytes.
func (r *Report) WriteHTML(w io.Writer) error {
	v := reportView{Seed: r.Seed, Store: r.Store, Results: r.Results, Estimates: r.Estimates, Headline: headlineSVG(r)}
	for i, p := range r.Patterns {
		pv := patternView{Pattern: p, ID: "pattern-" + p.Name, LimitStr: fmt.Sprintf("%d %s", p.Limit.Rate, per(p.Limit.Period))}
		rs := slices.DeleteFunc(slices.Clone(r.Results), func(x Result) bool { return x.Pattern != p.Name })
		scale := chartScale(rs)
		for _, x := range rs {
			pv.Charts = append(pv.Charts, chartSVG(p, x, scale))
		}
		v.Patterns = append(v.Patterns, pv)
		// Populations are in the order of their patterns: the first is this one's.
		if p.Population != nil && v.Cloudflare == nil && len(r.Populations) > 0 && i < len(r.Estimates) {
			cf := &cloudflareView{Population: r.Populations[0], Sample: r.Estimates[i], SampleKeys: p.Keys, Workload: CloudflareWorkload}
			cf.Published.Requests, cf.Published.Sources = CloudflareRequests, CloudflareSources
			cf.Published.WrongRate, cf.Published.MeanDif = CloudflareWrongRate, CloudflareMeanDifference
			cf.Published.Missed, cf.Published.Overshoot = CloudflareMissedSources, CloudflareMissedOvershoot
			for j := range rs {
				switch rs[j].Algorithm {
				case sluice.SlidingWindow:
					cf.EndToEnd = &rs[j]
				case sluice.SlidingLog:
					cf.Reference = &rs[j]
				}
			}
			v.Cloudflare = cf
		}
	}
	if err := reportTmpl.Execute(w, v); err != nil {
		return fmt.Errorf("sim: writing the HTML report: %w", err)
	}
	return nil
}

// scale is shared by a pattern's charts so that they compare at a glance.
type scale struct {
	perBin int64 // the largest admitted+denied in a bin
	window int64 // the top of the window panel: at least 2·Rate
	rate   int64
}

func chartScale(rs []Result) scale {
	var s scale
	for _, x := range rs {
		s.rate = x.Timeline.Rate
		s.window = max(s.window, 2*x.Timeline.Rate)
		for i := range x.Timeline.Admitted {
			s.perBin = max(s.perBin, x.Timeline.Admitted[i]+x.Timeline.Denied[i])
			s.window = max(s.window, x.Timeline.Window[i])
		}
	}
	s.perBin = max(s.perBin, 1)
	return s
}

// chartSVG draws one algorithm's timeline: stacked admitted/denied bars per bin above, the
// rolling-window count (a step line) against the limit (dashed) below.
func chartSVG(p Pattern, x Result, s scale) template.HTML {
	tl := x.Timeline
	c := timeChart{
		attrs: [][2]string{{"pattern", p.Name}, {"algorithm", x.Algorithm.String()}},
		label: fmt.Sprintf("%s under %s", p.Name, x.Algorithm),
		title: x.Algorithm.String(),
		sub: fmt.Sprintf("%d admitted · %d denied · peak %.2f× limit",
			sum(tl.Admitted), sum(tl.Denied), float64(maxOf(tl.Window))/float64(tl.Rate)),
		span: p.Duration,
		bars: panel{
			label: "requests per " + humanDuration(tl.BinWidth),
			top:   s.perBin,
			series: []series{
				{class: "admitted", title: "admitted", v: tl.Admitted},
				{class: "denied", title: "denied", v: tl.Denied},
			},
		},
		lines: panel{
			label:  "units admitted in the last " + humanDuration(p.Limit.Period),
			top:    s.window,
			ticks:  []int64{0, s.rate, 2 * s.rate},
			series: []series{{class: "window", title: "rolling window count", v: tl.Window}},
			refs:   []ref{{class: "limit", title: fmt.Sprintf("limit %d", s.rate), v: s.rate}},
		},
	}
	return c.svg()
}

func sum(v []int64) int64 {
	var s int64
	for _, x := range v {
		s += x
	}
	return s
}

func maxOf(v []int64) int64 { return slices.Max(append(v[:len(v):len(v)], 0)) }

// humanDuration prints whole hours, minutes and seconds the way people write them ("24 h",
// "10 min", "30 s", "250 ms").
func humanDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0 s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	case d%time.Millisecond == 0 && d < time.Second:
		return fmt.Sprintf("%d ms", d/time.Millisecond)
	}
	return d.String()
}

// per says "per second", "per minute", "per hour" or "per <duration>".
func per(d time.Duration) string {
	units := map[time.Duration]string{time.Second: "second", time.Minute: "minute", time.Hour: "hour"}
	if unit, ok := units[d]; ok {
		return "per " + unit
	}
	return "per " + humanDuration(d)
}
