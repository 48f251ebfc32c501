package main

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strings"
)

// The HTML report; its look is sluice simulate's.
//
//go:embed report.html.tmpl
var reportTemplate string

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct":  pct,
	"f0":   func(f float64) string { return fmt.Sprintf("%.0f", f) },
	"f1":   func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"add":  func(a, b float64) float64 { return a + b },
	"add2": func(a, b int) int { return a + b },
	"lost": func(p phaseStat) int {
		c, s := p.Critical, p.Sheddable
		return c.TimedOut + s.TimedOut + c.Failed + s.Failed + c.Overflow + s.Overflow
	},
}).Parse(reportTemplate))

type reportView struct {
	*report
	Charts []template.HTML
}

// writeHTML writes a self-contained page (inline SVG and CSS): the table, the targets,
// and per protection a chart of successes a second by class and of the limit and the
// requests in flight over time.
func (rep *report) writeHTML(w io.Writer) error {
	v := reportView{report: rep}
	for _, r := range rep.Runs {
		v.Charts = append(v.Charts, rep.chart(r))
	}
	if err := reportTmpl.Execute(w, v); err != nil {
		return fmt.Errorf("writing the HTML report: %w", err)
	}
	return nil
}

const (
	chartW, chartH   = 760, 330
	plotX, plotW     = 48, 700
	barsTop, barsH   = 40, 100
	linesTop, linesH = 175, 120
	axisLabelY       = 318
)

func (rep *report) chart(r runResult) template.HTML {
	var total float64
	for _, p := range rep.Phases {
		total += p.Duration.Seconds()
	}
	x := func(t float64) float64 { return plotX + t/total*plotW }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" data-protection="%s" aria-label="%s">`, chartW, chartH, r.Protection, r.Protection)
	fmt.Fprintf(&b, `<text class="title" x="%d" y="14">%s</text>`, plotX, r.Protection)

	// Phases.
	t := 0.0
	for _, p := range rep.Phases {
		if p.Slow {
			fmt.Fprintf(&b, `<rect class="slow" x="%.1f" y="%d" width="%.1f" height="%d"><title>upstream at half speed</title></rect>`,
				x(t), barsTop, x(t+p.Duration.Seconds())-x(t), linesTop+linesH-barsTop)
		}
		fmt.Fprintf(&b, `<line class="phase" x1="%.1f" y1="%d" x2="%.1f" y2="%d"/>`, x(t), barsTop-8, x(t), linesTop+linesH)
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d">%s</text>`, x(t)+3, barsTop-10, p.Name)
		t += p.Duration.Seconds()
	}

	// Successes a second, by class, stacked, on the capacity's scale.
	top := max(1.25*rep.Capacity, 1.1*peakOK(r.Series))
	y0 := float64(barsTop + barsH)
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, plotX, y0, plotX+plotW, y0)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end">%.0f</text>`, plotX-4, barsTop+4, top)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">0</text>`, plotX-4, y0)
	cy := y0 - rep.Capacity/top*barsH
	fmt.Fprintf(&b, `<line class="capacity" x1="%d" y1="%.1f" x2="%d" y2="%.1f"><title>capacity %.0f/s</title></line>`, plotX, cy, plotX+plotW, cy, rep.Capacity)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">cap</text>`, plotX-4, cy+3)
	var crit, shed strings.Builder
	bw := x(1) - x(0)
	for i, s := range r.Series {
		hc := float64(s.CriticalOK) / top * barsH
		hs := float64(s.SheddableOK) / top * barsH
		if hc > 0 {
			fmt.Fprintf(&crit, "M%.2f %.2fh%.2fv%.2fh%.2fz", x(float64(i)), y0-hc, bw*0.85, hc, -bw*0.85)
		}
		if hs > 0 {
			fmt.Fprintf(&shed, "M%.2f %.2fh%.2fv%.2fh%.2fz", x(float64(i)), y0-hc-hs, bw*0.85, hs, -bw*0.85)
		}
	}
	fmt.Fprintf(&b, `<path class="critical" d="%s"><title>critical successes a second</title></path>`, crit.String())
	fmt.Fprintf(&b, `<path class="sheddable" d="%s"><title>sheddable successes a second</title></path>`, shed.String())

	// Limit and in flight.
	ltop := 1
	for _, s := range r.Samples {
		ltop = max(ltop, s.Limit, s.Inflight+s.Queued)
	}
	ly := func(v int) float64 { return float64(linesTop+linesH) - float64(v)/float64(ltop)*linesH }
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, plotX, ly(0), plotX+plotW, ly(0))
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%d</text>`, plotX-4, ly(ltop)+4, ltop)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">0</text>`, plotX-4, ly(0))
	wy := ly(rep.Workers)
	fmt.Fprintf(&b, `<line class="capacity" x1="%d" y1="%.1f" x2="%d" y2="%.1f"><title>the upstream's %d workers</title></line>`, plotX, wy, plotX+plotW, wy, rep.Workers)
	if wy < ly(0)-10 && wy > ly(ltop)+10 {
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%d</text>`, plotX-4, wy+3, rep.Workers)
	}
	path := func(class, title string, v func(sampleAt) int) {
		var p strings.Builder
		for i, s := range r.Samples {
			if i == 0 {
				fmt.Fprintf(&p, "M%.2f %.2f", x(s.T), ly(v(s)))
			} else {
				fmt.Fprintf(&p, "L%.2f %.2f", x(s.T), ly(v(s)))
			}
		}
		fmt.Fprintf(&b, `<path class="%s" d="%s"><title>%s</title></path>`, class, p.String(), title)
	}
	path("queued", "in flight and queued in the protection", func(s sampleAt) int { return s.Inflight + s.Queued })
	path("inflight", "in flight through the protection", func(s sampleAt) int { return s.Inflight })
	if r.Protection != "none" {
		path("limit", "the limit", func(s sampleAt) int { return s.Limit })
	}

	for _, f := range []float64{0, 0.5, 1} {
		anchor := map[float64]string{0: "start", 0.5: "middle", 1: "end"}[f]
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="%s">%.0f s</text>`, plotX+f*plotW, axisLabelY, anchor, f*total)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func peakOK(ss []second) float64 {
	var m int
	for _, s := range ss {
		m = max(m, s.CriticalOK+s.SheddableOK)
	}
	return float64(m)
}
