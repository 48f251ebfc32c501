package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// report is the whole benchmark: the setup, and one run per protection.
type report struct {
	Started      time.Time        `json:"started"`
	Capacity     float64          `json:"capacity"` // requests a second at full speed
	Workers      int              `json:"workers"`
	Median       time.Duration    `json:"median_ns"`
	Sigma        float64          `json:"sigma"`
	Queue        int              `json:"queue"`
	Timeout      time.Duration    `json:"timeout_ns"`
	Fixed        int              `json:"fixed_limit"`
	Adaptive     adaptiveSettings `json:"adaptive"`
	Sluice       sluiceSettings   `json:"sluice"`
	Phases       []phase          `json:"phases"`
	SettleWithin time.Duration    `json:"settle_within_ns"`
	Swing        float64          `json:"swing"`
	Runs         []runResult      `json:"runs"`
	Targets      []target         `json:"targets"`
}

// classStat is what one class of requests met in one phase. Latencies are of successes.
type classStat struct {
	Offered  int     `json:"offered"`
	OK       int     `json:"ok"`
	Shed     int     `json:"shed"`
	Rejected int     `json:"upstream_rejected"`
	TimedOut int     `json:"timed_out"`
	Failed   int     `json:"failed"`
	Overflow int     `json:"overflowed"`
	Success  float64 `json:"success"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
}

// phaseStat is one phase of one protection's run.
type phaseStat struct {
	Name      string    `json:"name"`
	Load      float64   `json:"load"`
	Slow      bool      `json:"slow"`
	Goodput   float64   `json:"goodput"`       // successes answered during the phase, a second
	Share     float64   `json:"goodput_share"` // of the capacity at the phase's speed
	Critical  classStat `json:"critical"`
	Sheddable classStat `json:"sheddable"`
	LimitMean float64   `json:"limit_mean"`
	LimitMin  int       `json:"limit_min"`
	LimitMax  int       `json:"limit_max"`
	Inflight  float64   `json:"inflight_mean"`
}

// second is one second of a run: successes by when they were answered, the rest by when
// they were due.
type second struct {
	CriticalOK  int `json:"critical_ok"`
	SheddableOK int `json:"sheddable_ok"`
	Refused     int `json:"refused"` // shed by the protection or rejected by the upstream
	Lost        int `json:"lost"`    // timed out, failed or overflowed
}

// settling is how the limit behaved after the upstream halved its speed.
type settling struct {
	At      float64 `json:"at"`     // when the upstream halved, seconds into the run
	Before  float64 `json:"before"` // the median limit over the second half of the phase before
	Final   float64 `json:"final"`  // the median limit from At + SettleWithin to the end
	After   float64 `json:"settled_after"`
	Settled bool    `json:"settled"`   // stayed within ±Swing of Final from After on, and After ≤ SettleWithin
	Max     float64 `json:"max_swing"` // the largest |limit − Final| ÷ Final from At + SettleWithin on
}

// target is one of issue 42's targets, judged on one run.
type target struct {
	Protection string `json:"protection"`
	What       string `json:"what"`
	Value      string `json:"value"`
	Met        bool   `json:"met"`
}

func (r *runResult) summarise(phases []phase, capacity float64) {
	var t float64
	bounds := make([]float64, len(phases)+1)
	for i, p := range phases {
		r.Phases = append(r.Phases, phaseStat{Name: p.Name, Load: p.Load, Slow: p.Slow})
		t += p.Duration.Seconds()
		bounds[i+1] = t
	}
	lat := make([][2][]float64, len(phases))
	completed := make([]int, len(phases)) // successes by when they were answered
	r.Series = make([]second, int(math.Ceil(t)))
	for _, rec := range r.records {
		due := rec.due.Seconds()
		i, _ := slices.BinarySearch(bounds, due)
		i = min(max(i-1, 0), len(phases)-1)
		if due == bounds[i+1] && i+1 < len(phases) {
			i++
		}
		c := &r.Phases[i].Critical
		if rec.class == sheddable {
			c = &r.Phases[i].Sheddable
		}
		c.Offered++
		s := &r.Series[min(int(due), len(r.Series)-1)]
		switch rec.outcome {
		case ok:
			c.OK++
			lat[i][rec.class] = append(lat[i][rec.class], float64(rec.latency)/1e6)
			done := (rec.due + rec.latency).Seconds()
			if j, _ := slices.BinarySearch(bounds, done); j >= 1 && j <= len(phases) && done < t {
				if done == bounds[j] {
					j++
				}
				completed[j-1]++
			}
			s := &r.Series[min(int(done), len(r.Series)-1)]
			if rec.class == critical {
				s.CriticalOK++
			} else {
				s.SheddableOK++
			}
		case shedded:
			c.Shed++
			s.Refused++
		case rejected:
			c.Rejected++
			s.Refused++
		case timedOut:
			c.TimedOut++
			s.Lost++
		case failed:
			c.Failed++
			s.Lost++
		case overflowed:
			c.Overflow++
			s.Lost++
		}
	}
	for i := range r.Phases {
		ps := &r.Phases[i]
		d := phases[i].Duration.Seconds()
		ps.Goodput = float64(completed[i]) / d
		ps.Share = ps.Goodput / capacity
		if ps.Slow {
			ps.Share *= 2
		}
		for k, c := range []*classStat{&ps.Critical, &ps.Sheddable} {
			if c.Offered > 0 {
				c.Success = float64(c.OK) / float64(c.Offered)
			}
			c.P50, c.P99 = quantile(lat[i][k], 0.50), quantile(lat[i][k], 0.99)
		}
		var n, sum, inf int
		ps.LimitMin = math.MaxInt
		for _, s := range r.Samples {
			if s.T < bounds[i] || s.T >= bounds[i+1] {
				continue
			}
			n++
			sum += s.Limit
			inf += s.Inflight
			ps.LimitMin, ps.LimitMax = min(ps.LimitMin, s.Limit), max(ps.LimitMax, s.Limit)
		}
		if n > 0 {
			ps.LimitMean, ps.Inflight = float64(sum)/float64(n), float64(inf)/float64(n)
		} else {
			ps.LimitMin = 0
		}
	}
	for i, p := range phases {
		if p.Slow && i > 0 && !phases[i-1].Slow {
			r.Settle = settle(r.Samples, bounds[i-1], bounds[i], bounds[i+1])
		}
	}
}

// settle judges the limit after the upstream halves at `at`: where it ends (the median
// from at + SettleWithin to end), when it last came within ±Swing of that for good, and
// how far it strays from it after at + SettleWithin. It is nil when nothing was sampled.
func settle(samples []sampleAt, from, at, end float64) *settling {
	var before, final []float64
	for _, s := range samples {
		switch {
		case s.T >= (from+at)/2 && s.T < at:
			before = append(before, float64(s.Limit))
		case s.T >= at+settleIn.Seconds() && s.T < end:
			final = append(final, float64(s.Limit))
		}
	}
	if len(final) == 0 || len(before) == 0 {
		return nil
	}
	st := &settling{At: at, Before: quantile(before, 0.5), Final: quantile(final, 0.5)}
	if st.Final == 0 {
		return nil
	}
	st.After = 0
	for _, s := range samples {
		if s.T < at || s.T >= end {
			continue
		}
		dev := math.Abs(float64(s.Limit)-st.Final) / st.Final
		if dev > *swing {
			st.After = s.T - at + sample.Seconds()
		}
		if s.T >= at+settleIn.Seconds() {
			st.Max = max(st.Max, dev)
		}
	}
	st.Settled = st.After <= settleIn.Seconds() && st.Max <= *swing
	return st
}

// quantile is the q-quantile of v (nearest rank), 0 for none. It sorts v.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// evaluate judges every run against issue 42's targets.
func (rep *report) evaluate() {
	lo, hi := -1, -1
	for i, p := range rep.Phases {
		if p.Slow {
			continue
		}
		if lo < 0 || p.Load < rep.Phases[lo].Load {
			lo = i
		}
		if hi < 0 || p.Load > rep.Phases[hi].Load {
			hi = i
		}
	}
	if lo < 0 {
		return
	}
	for _, r := range rep.Runs {
		add := func(what, value string, met bool) {
			rep.Targets = append(rep.Targets, target{Protection: r.Protection, What: what, Value: value, Met: met})
		}
		h, l := r.Phases[hi], r.Phases[lo]
		add(fmt.Sprintf("critical success at %s ≥ 99%%", h.Name), pct(h.Critical.Success), h.Critical.Success >= 0.99)
		p99 := fmt.Sprintf("%.0f ms vs %.0f ms (%.2f×)", h.Critical.P99, l.Critical.P99, h.Critical.P99/l.Critical.P99)
		if h.Critical.OK == 0 {
			p99 = fmt.Sprintf("no successes (%.0f ms at %s)", l.Critical.P99, l.Name)
		}
		add(fmt.Sprintf("critical p99 at %s ≤ 2× its p99 at %s", h.Name, l.Name), p99, h.Critical.OK > 0 && h.Critical.P99 <= 2*l.Critical.P99)
		add(fmt.Sprintf("goodput at %s ≥ 90%% of capacity", h.Name), fmt.Sprintf("%.0f/s, %s", h.Goodput, pct(h.Goodput/rep.Capacity)),
			h.Goodput >= 0.9*rep.Capacity)
		if st := r.Settle; st != nil && r.Protection != "none" {
			add(fmt.Sprintf("after the upstream halves, the limit settles within %v and then swings ≤ ±%.0f%%", rep.SettleWithin, rep.Swing*100),
				fmt.Sprintf("%.0f → %.0f, settled after %.1f s, swing ±%.0f%%", st.Before, st.Final, st.After, st.Max*100), st.Settled)
		}
	}
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// print writes the table and the targets.
func (rep *report) print(w io.Writer) {
	fmt.Fprintf(w, "\n| protection | phase | offered/s | goodput/s (of capacity) | critical ok | critical p50 / p99 ms | sheddable ok | sheddable p50 / p99 ms | shed | upstream 503 | lost (timed out, failed, not sent) | limit mean (min–max) |\n")
	fmt.Fprintf(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rep.Runs {
		for i, p := range r.Phases {
			ph := rep.Phases[i]
			c, s := p.Critical, p.Sheddable
			limit := "–"
			if p.LimitMax > 0 {
				limit = fmt.Sprintf("%.1f (%d–%d)", p.LimitMean, p.LimitMin, p.LimitMax)
			}
			fmt.Fprintf(w, "| %s | %s | %.0f | %.0f (%s) | %s | %.0f / %.0f | %s | %.0f / %.0f | %d | %d | %d | %s |\n",
				r.Protection, p.Name, ph.Critical+ph.Shed, p.Goodput, pct(p.Share),
				pct(c.Success), c.P50, c.P99, pct(s.Success), s.P50, s.P99,
				c.Shed+s.Shed, c.Rejected+s.Rejected, c.TimedOut+s.TimedOut+c.Failed+s.Failed+c.Overflow+s.Overflow, limit)
		}
	}
	fmt.Fprintln(w)
	for _, t := range rep.Targets {
		mark := "met"
		if !t.Met {
			mark = "NOT met"
		}
		fmt.Fprintf(w, "%-8s %s: %s — %s\n", t.Protection, t.What, t.Value, mark)
	}
}
