package sim

import (
	"fmt"
	"html"
	"html/template"
	"strings"
	"time"
)

// timeChart is one chart of a report over a run's time: a panel of stacked bars above a
// panel of step lines, on one time axis from 0 to span. Every series is one element of
// class "series <class>", so that tests and readers can find it; a series' values are
// equal bins of the span.
type timeChart struct {
	attrs [][2]string // data-* attributes of the svg element, as name and value
	label string      // aria-label
	title string      // top left
	sub   string      // top right
	span  time.Duration
	bars  panel // stacked, the first series at the bottom
	lines panel // step lines
	shade []shade
	marks []mark
}

// panel is one panel of a timeChart: its values run from 0 at the bottom to top.
type panel struct {
	label  string  // above the panel
	top    int64   // at least 1
	ticks  []int64 // values labelled on the axis, besides 0 and top for bars
	series []series
	refs   []ref
}

type series struct {
	class, title string
	v            []int64
}

// ref is a horizontal rule across a panel at v.
type ref struct {
	class, title string
	v            int64
}

// shade is a stretch of time shaded across both panels.
type shade struct {
	class, title string
	from, to     time.Duration
}

// mark is a labelled vertical rule at an instant.
type mark struct {
	at    time.Duration
	label string
}

// Chart geometry, in SVG user units.
const (
	chartW     = 420
	chartH     = 236
	plotX      = 44
	plotW      = 364
	barsTop    = 34
	barsH      = 78
	windowTop  = 134
	windowH    = 72
	axisLabelY = 226
)

// svg draws the chart.
func (c *timeChart) svg() template.HTML {
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img"`, chartW, chartH)
	for _, a := range c.attrs {
		fmt.Fprintf(&b, ` data-%s="%s"`, a[0], esc(a[1]))
	}
	fmt.Fprintf(&b, ` aria-label="%s">`, esc(c.label))
	fmt.Fprintf(&b, `<text class="title" x="%d" y="14">%s</text>`, plotX, esc(c.title))
	fmt.Fprintf(&b, `<text class="sub" x="%d" y="14" text-anchor="end">%s</text>`, plotX+plotW, esc(c.sub))

	x := func(d time.Duration) float64 { return float64(plotX) + float64(d)/float64(c.span)*plotW }
	for _, s := range c.shade {
		fmt.Fprintf(&b, `<rect class="%s" x="%.2f" y="%d" width="%.2f" height="%d"><title>%s</title></rect>`,
			s.class, x(s.from), barsTop, x(s.to)-x(s.from), windowTop+windowH-barsTop, esc(s.title))
	}
	for _, m := range c.marks {
		fmt.Fprintf(&b, `<line class="mark" x1="%.2f" y1="%d" x2="%.2f" y2="%d"/>`, x(m.at), barsTop-2, x(m.at), windowTop+windowH)
		fmt.Fprintf(&b, `<text class="tick" x="%.2f" y="%d">%s</text>`, x(m.at)+2, axisLabelY-12, esc(m.label))
	}

	// Stacked bars.
	bp := c.bars
	y0 := float64(barsTop + barsH)
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, plotX, y0, plotX+plotW, y0)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d" text-anchor="end">%d</text>`, plotX-4, barsTop+4, bp.top)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">0</text>`, plotX-4, y0)
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d">%s</text>`, plotX+2, barsTop-4, esc(bp.label))
	var base []float64
	for _, s := range bp.series {
		if base == nil {
			base = make([]float64, len(s.v))
		}
		bw := float64(plotW) / float64(len(s.v))
		var d strings.Builder
		for i, v := range s.v {
			h := float64(v) / float64(bp.top) * barsH
			if h > 0 {
				fmt.Fprintf(&d, "M%.2f %.2fh%.2fv%.2fh%.2fz", float64(plotX)+float64(i)*bw, y0-base[i]-h, bw*0.85, h, -bw*0.85)
			}
			base[i] += h
		}
		fmt.Fprintf(&b, `<path class="series %s" d="%s"><title>%s</title></path>`, s.class, d.String(), esc(s.title))
	}
	by := func(v int64) float64 { return y0 - float64(v)/float64(bp.top)*barsH }
	for _, r := range bp.refs {
		fmt.Fprintf(&b, `<line class="series %s" x1="%d" y1="%.2f" x2="%d" y2="%.2f"><title>%s</title></line>`,
			r.class, plotX, by(r.v), plotX+plotW, by(r.v), esc(r.title))
	}

	// Step lines.
	lp := c.lines
	wy := func(v int64) float64 { return float64(windowTop+windowH) - float64(v)/float64(lp.top)*windowH }
	fmt.Fprintf(&b, `<line class="axis" x1="%d" y1="%.1f" x2="%d" y2="%.1f"/>`, plotX, wy(0), plotX+plotW, wy(0))
	fmt.Fprintf(&b, `<text class="tick" x="%d" y="%d">%s</text>`, plotX+2, windowTop-4, esc(lp.label))
	for _, v := range lp.ticks {
		fmt.Fprintf(&b, `<text class="tick" x="%d" y="%.1f" text-anchor="end">%d</text>`, plotX-4, wy(v)+3, v)
	}
	for _, r := range lp.refs {
		fmt.Fprintf(&b, `<line class="series %s" x1="%d" y1="%.2f" x2="%d" y2="%.2f"><title>%s</title></line>`,
			r.class, plotX, wy(r.v), plotX+plotW, wy(r.v), esc(r.title))
	}
	for _, s := range lp.series {
		bw := float64(plotW) / float64(len(s.v))
		var d strings.Builder
		fmt.Fprintf(&d, "M%d %.2f", plotX, wy(0))
		for i, v := range s.v {
			fmt.Fprintf(&d, "V%.2fH%.2f", wy(v), float64(plotX)+float64(i+1)*bw)
		}
		fmt.Fprintf(&b, `<path class="series %s" d="%s"><title>%s</title></path>`, s.class, d.String(), esc(s.title))
	}

	// Time axis.
	for _, f := range []float64{0, 0.5, 1} {
		anchor := map[float64]string{0: "start", 0.5: "middle", 1: "end"}[f]
		fmt.Fprintf(&b, `<text class="tick" x="%.1f" y="%d" text-anchor="%s">%s</text>`,
			float64(plotX)+f*plotW, axisLabelY, anchor, humanDuration(time.Duration(f*float64(c.span)).Round(time.Second)))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
