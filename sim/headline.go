package sim

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
)

// Headline chart geometry, in SVG user units.
const (
	headW      = 1240
	headH      = 340
	headPlotX  = 56
	headPlotW  = 1164
	headTop    = 48
	headPlotH  = 230
	headLabelY = headTop + headPlotH + 18
)

// headlineSVG draws the report's opening chart: every run's max_window_ratio (the most
// units admitted in any rolling window, over the limit), one group of bars per pattern,
// one bar per algorithm, with 1.0× (exact) marked. Each bar is a rect of class "bar"
// with data-pattern, data-algorithm and data-ratio, so that tests and readers can find it;
// its height is proportional to the ratio.
func headlineSVG(r *Report) template.HTML {
	var algs []sluice.Algorithm
	top := 2.0
	for _, x := range r.Results {
		if !slices.Contains(algs, x.Algorithm) {
			algs = append(algs, x.Algorithm)
		}
		top = max(top, x.MaxWindowRatio)
	}
	top = math.Ceil(top*2) / 2 // the axis ends on a half
	esc := html.EscapeString
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="headline" id="headline-chart" viewBox="0 0 %d %d" role="img" aria-label="worst rolling-window ratio per algorithm and pattern">`, headW, headH)
	// Legend: one swatch per algorithm, in the order of the bars.
	for i, a := range algs {
		x := headPlotX + i*150
		fmt.Fprintf(&b, `<rect class="swatch alg-%d" x="%d" y="10" width="14" height="10"/><text class="tick" x="%d" y="19">%s</text>`, i, x, x+20, a)
	}
	y := func(v float64) float64 { return headTop + headPlotH - v/top*headPlotH }
	for v := 0.0; v <= top+1e-9; v += 0.5 {
		cls := "grid"
		if v == 0 {
			cls = "axis"
		}
		fmt.Fprintf(&b, `<line class="%s" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, cls, headPlotX, y(v), headPlotX+headPlotW, y(v))
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%.1f×</text>`, headPlotX-6, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<line class="exact" x1="%d" y1="%.2f" x2="%d" y2="%.2f"><title>1.0×: never more than the limit in any window</title></line>`,
		headPlotX, y(1), headPlotX+headPlotW, y(1))
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f">1.0× exact</text>`, headPlotX+4, y(1)-5)

	group := float64(headPlotW) / float64(max(len(r.Patterns), 1))
	bw := group * 0.8 / float64(max(len(algs), 1))
	for pi, p := range r.Patterns {
		gx := float64(headPlotX) + float64(pi)*group + group*0.1
		worst := 0.0
		for _, x := range r.Results {
			if x.Pattern != p.Name {
				continue
			}
			ai := slices.Index(algs, x.Algorithm)
			bx := gx + float64(ai)*bw
			fmt.Fprintf(&b, `<rect class="bar alg-%d" x="%.2f" y="%.2f" width="%.2f" height="%.2f" data-pattern="%s" data-algorithm="%s" data-ratio="%.3f"><title>%s, %s: %.3f×</title></rect>`,
				ai, bx, y(x.MaxWindowRatio), bw*0.9, y(0)-y(x.MaxWindowRatio), esc(p.Name), x.Algorithm, x.MaxWindowRatio, esc(p.Name), x.Algorithm, x.MaxWindowRatio)
			worst = max(worst, x.MaxWindowRatio)
		}
		mid := gx + group*0.4
		fmt.Fprintf(&b, `<text class="value" x="%.1f" y="%.1f" text-anchor="middle">%.2f×</text>`, mid, y(worst)-5, worst)
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="middle">%s</text>`, mid, headLabelY, esc(p.Name))
	}
	fmt.Fprintf(&b, `<text class="sub" x="%d" y="%d">most units admitted for one key in any rolling window of one period, over the limit; the worst per pattern printed above its group</text>`,
		headPlotX, headLabelY+26)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
