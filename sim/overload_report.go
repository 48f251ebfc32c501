package sim

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"time"
)

//go:embed overload.html.tmpl
var overloadTemplate string

var overloadTmpl = template.Must(template.New("overload").Funcs(template.FuncMap{
	"style": style,
	"pct":   pct,
	"f0":    func(f float64) string { return fmt.Sprintf("%.0f", f) },
	"f1":    func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"add":   func(a, b float64) float64 { return a + b },
	"add2":  func(a, b int) int { return a + b },
	// grade marks a share that reaches issue 42's target for it.
	"grade": func(v, target float64) string {
		if v >= target {
			return "good"
		}
		return ""
	},
}).Parse(overloadTemplate))

type overloadView struct {
	*OverloadReport
	Setup  string
	Mix    string
	Sample string
	Charts []template.HTML
}

// WriteHTML writes a self-contained HTML report in the style of Report.WriteHTML: per
// protection a chart of the successes a second by class above the limit and the requests
// in flight over time, then the summary table. It is all inline SVG and CSS; the same
// report gives the same bytes.
func (r *OverloadReport) WriteHTML(w io.Writer) error {
	v := overloadView{OverloadReport: r, Setup: r.setup(), Mix: "half of it critical and half sheddable"}
	for _, p := range r.Phases {
		if p.Critical < p.Sheddable-1e-9 {
			v.Mix = "critical arrivals capped, the rest sheddable"
		}
	}
	if len(r.Runs) > 0 && len(r.Runs[0].Samples) > 1 {
		v.Sample = humanDuration(r.Runs[0].Samples[1].At - r.Runs[0].Samples[0].At)
	}
	for _, run := range r.Runs {
		v.Charts = append(v.Charts, r.chart(run))
	}
	if err := overloadTmpl.Execute(w, v); err != nil {
		return fmt.Errorf("sim: writing the HTML report: %w", err)
	}
	return nil
}

// chart draws one protection's run: successes a second by class against the capacity,
// and the limit, the requests in flight and those waiting besides against the workers,
// with the phases marked and the upstream's half speed shaded.
func (r *OverloadReport) chart(run OverloadRun) template.HTML {
	var span time.Duration
	var marks []mark
	var shades []shade
	for _, p := range r.Phases {
		marks = append(marks, mark{at: span, label: p.Name})
		if p.Slow {
			shades = append(shades, shade{class: "slow", title: "the upstream at half speed", from: span, to: span + p.Duration})
		}
		span += p.Duration
	}
	crit := make([]int64, len(run.Seconds))
	shed := make([]int64, len(run.Seconds))
	var peak int64
	for i, s := range run.Seconds {
		crit[i], shed[i] = s.CriticalOK, s.SheddableOK
		peak = max(peak, s.CriticalOK+s.SheddableOK)
	}
	capacity := int64(math.Round(r.Capacity))
	limit := make([]int64, len(run.Samples))
	inflight := make([]int64, len(run.Samples))
	held := make([]int64, len(run.Samples))
	top := int64(r.Workers) + 1
	for i, s := range run.Samples {
		limit[i], inflight[i], held[i] = int64(s.Limit), int64(s.InFlight), int64(s.InFlight+s.Queued)
		top = max(top, limit[i], held[i])
	}
	lines := []series{
		{class: "queued", title: "in flight and waiting in the protection", v: held},
		{class: "inflight", title: "in flight through the protection", v: inflight},
	}
	if run.Protection != "none" {
		lines = append(lines, series{class: "limit", title: "the limit", v: limit})
	}
	sub := ""
	if hi := r.highest(); hi >= 0 {
		p := run.Phases[hi]
		sub = fmt.Sprintf("at %s: goodput %s of capacity, critical ok %s", p.Name, pct(p.Share), pct(p.Critical.Success))
	}
	c := timeChart{
		attrs: [][2]string{{"protection", run.Protection}},
		label: run.Protection + " under the overload scenario",
		title: run.Protection,
		sub:   sub,
		span:  span,
		bars: panel{
			label: "successes a second",
			top:   max(capacity*5/4, peak),
			series: []series{
				{class: "critical", title: "critical successes a second", v: crit},
				{class: "sheddable", title: "sheddable successes a second", v: shed},
			},
			refs: []ref{{class: "capacity", title: fmt.Sprintf("capacity %d/s", capacity), v: capacity}},
		},
		lines: panel{
			label:  "requests in flight",
			top:    top,
			ticks:  ticks(top, int64(r.Workers)),
			series: lines,
			refs:   []ref{{class: "capacity", title: fmt.Sprintf("the upstream's %d workers", r.Workers), v: int64(r.Workers)}},
		},
		shade: shades,
		marks: marks,
	}
	return c.svg()
}

// highest is the index of the phase of the highest load at full speed, -1 for none.
func (r *OverloadReport) highest() int {
	hi := -1
	for i, p := range r.Phases {
		if !p.Slow && (hi < 0 || p.Load > r.Phases[hi].Load) {
			hi = i
		}
	}
	return hi
}

// ticks labels 0, top and mid between them when it is far enough from both to read.
func ticks(top, mid int64) []int64 {
	if mid*8 < top || mid*8 > top*7 {
		return []int64{0, top}
	}
	return []int64{0, mid, top}
}
