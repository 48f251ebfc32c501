package sim

import (
	"fmt"
	"math"
	"time"
)

// OverloadSettle is how a protection's limit behaved after the upstream halved its
// speed, judged as bench/cmd/overload judges it: Final is where the limit ends (the
// median of the samples from At + SettleWithin to the end of the slow phase), After is
// how long after At the limit last strayed beyond ±Swing of Final (plus one sample
// period), and MaxSwing is the largest |limit − Final| ÷ Final from At + SettleWithin on.
// The limit settled when After ≤ SettleWithin and MaxSwing ≤ Swing.
type OverloadSettle struct {
	At       time.Duration `json:"at_ns"`  // when the upstream halved its speed, into the run
	Before   float64       `json:"before"` // the median limit over the second half of the phase before
	Final    float64       `json:"final"`
	After    time.Duration `json:"settled_after_ns"`
	MaxSwing float64       `json:"max_swing"`
	Settled  bool          `json:"settled"`
}

// OverloadTarget is one of issue 42's targets judged on one protection's run.
type OverloadTarget struct {
	Protection string `json:"protection"`
	What       string `json:"what"`
	Value      string `json:"value"`
	Met        bool   `json:"met"`
}

// settle judges the samples after the upstream halves at `at` (ns into the run), the
// phase before having begun at from and the slow one ending at end. It is nil when a
// stretch it needs holds no sample or the limit ends at 0 (no limit).
func settle(samples []OverloadSample, from, at, end int64, within, sample time.Duration, swing float64) *OverloadSettle {
	var before, final []float64
	for _, s := range samples {
		t := int64(s.At)
		switch {
		case t >= (from+at)/2 && t < at:
			before = append(before, float64(s.Limit))
		case t >= at+int64(within) && t < end:
			final = append(final, float64(s.Limit))
		}
	}
	if len(before) == 0 || len(final) == 0 {
		return nil
	}
	st := &OverloadSettle{At: time.Duration(at), Before: quantile(before, 0.5), Final: quantile(final, 0.5)}
	if st.Final == 0 {
		return nil
	}
	for _, s := range samples {
		t := int64(s.At)
		if t < at || t >= end {
			continue
		}
		dev := math.Abs(float64(s.Limit)-st.Final) / st.Final
		if dev > swing {
			st.After = time.Duration(t-at) + sample
		}
		if t >= at+int64(within) {
			st.MaxSwing = max(st.MaxSwing, dev)
		}
	}
	st.Settled = st.After <= within && st.MaxSwing <= swing
	return st
}

// evaluate judges every run against issue 42's targets, as bench/cmd/overload does: at
// the highest load at full speed, critical success ≥ 99%, critical p99 ≤ 2× its p99 at
// the lowest load, and goodput ≥ 90% of the capacity; and, for a protection with a
// limit, that the limit settles after the upstream halves its speed.
func (r *OverloadReport) evaluate() {
	lo, hi := -1, r.highest()
	for i, p := range r.Phases {
		if !p.Slow && (lo < 0 || p.Load < r.Phases[lo].Load) {
			lo = i
		}
	}
	if hi < 0 {
		return
	}
	for _, run := range r.Runs {
		add := func(what, value string, met bool) {
			r.Targets = append(r.Targets, OverloadTarget{Protection: run.Protection, What: what, Value: value, Met: met})
		}
		h, l := run.Phases[hi], run.Phases[lo]
		add(fmt.Sprintf("critical success at %s ≥ 99%%", h.Name), pct(h.Critical.Success), h.Critical.Success >= 0.99)
		p99 := fmt.Sprintf("%.0f ms vs %.0f ms (%.2f×)", h.Critical.P99, l.Critical.P99, h.Critical.P99/l.Critical.P99)
		if h.Critical.OK == 0 {
			p99 = fmt.Sprintf("no successes (%.0f ms at %s)", l.Critical.P99, l.Name)
		}
		add(fmt.Sprintf("critical p99 at %s ≤ 2× its p99 at %s", h.Name, l.Name), p99,
			h.Critical.OK > 0 && h.Critical.P99 <= 2*l.Critical.P99)
		add(fmt.Sprintf("goodput at %s ≥ 90%% of capacity", h.Name), fmt.Sprintf("%.0f/s, %s", h.Goodput, pct(h.Goodput/r.Capacity)),
			h.Goodput >= 0.9*r.Capacity)
		if st := run.Settle; st != nil && run.Protection != "none" {
			add(fmt.Sprintf("after the upstream halves, the limit settles within %v and then swings ≤ ±%.0f%%", r.SettleWithin, r.Swing*100),
				fmt.Sprintf("%.0f → %.0f, settled after %.1f s, swing ±%.0f%%", st.Before, st.Final, st.After.Seconds(), st.MaxSwing*100),
				st.Settled)
		}
	}
}
