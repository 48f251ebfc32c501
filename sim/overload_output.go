package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteJSON writes the report as indented JSON: the scenario, and per protection its
// phases (the fields documented on PhaseResult) and samples. The same seed gives the same
// bytes.
func (r *OverloadReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// overloadCSVHeader is the first CSV row; WriteCSV's columns are in this order.
var overloadCSVHeader = []string{
	"protection", "phase", "load", "slow", "offered_per_s", "goodput", "goodput_share",
	"critical_offered", "critical_ok", "critical_shed", "critical_upstream_rejected", "critical_timed_out",
	"critical_success", "critical_p50_ms", "critical_p99_ms",
	"sheddable_offered", "sheddable_ok", "sheddable_shed", "sheddable_upstream_rejected", "sheddable_timed_out",
	"sheddable_success", "sheddable_p50_ms", "sheddable_p99_ms",
	"limit_mean", "limit_min", "limit_max", "inflight_mean",
}

// WriteCSV writes one row per protection and phase, with a header row.
func (r *OverloadReport) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(overloadCSVHeader)
	class := func(c ClassResult) []string {
		return []string{strconv.Itoa(c.OK + c.Shed + c.Rejected + c.TimedOut), strconv.Itoa(c.OK), strconv.Itoa(c.Shed),
			strconv.Itoa(c.Rejected), strconv.Itoa(c.TimedOut), ftoa(c.Success), ftoa(c.P50), ftoa(c.P99)}
	}
	for _, run := range r.Runs {
		for i, p := range run.Phases {
			ph := r.Phases[i]
			row := []string{run.Protection, p.Name, ftoa(ph.Load), strconv.FormatBool(ph.Slow),
				ftoa(ph.Critical + ph.Sheddable), ftoa(p.Goodput), ftoa(p.Share)}
			row = append(row, class(p.Critical)...)
			row = append(row, class(p.Sheddable)...)
			row = append(row, ftoa(p.LimitMean), strconv.Itoa(p.LimitMin), strconv.Itoa(p.LimitMax), ftoa(p.InFlight))
			cw.Write(row)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("sim: writing CSV: %w", err)
	}
	return nil
}

// WriteTable writes the scenario in one line, the results as an aligned text table for
// a terminal, one row per protection and phase, and then each target met or not.
func (r *OverloadReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "%s\n\n", r.setup())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "protection\tphase\toffered/s\tgoodput/s\tof capacity\tcritical ok\tp50 ms\tp99 ms\tsheddable ok\tp50 ms\tp99 ms\tshed\tupstream 503\ttimed out\tlimit mean (min–max)\t")
	for _, run := range r.Runs {
		for i, p := range run.Phases {
			ph := r.Phases[i]
			name := run.Protection
			if i > 0 {
				name = ""
			}
			limit := "-"
			if p.LimitMax > 0 {
				limit = fmt.Sprintf("%.1f (%d–%d)", p.LimitMean, p.LimitMin, p.LimitMax)
			}
			c, s := p.Critical, p.Sheddable
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%s\t%s\t%.0f\t%.0f\t%s\t%.0f\t%.0f\t%d\t%d\t%d\t%s\t\n",
				name, p.Name, ph.Critical+ph.Sheddable, p.Goodput, pct(p.Share),
				pct(c.Success), c.P50, c.P99, pct(s.Success), s.P50, s.P99,
				p.Shed(), c.Rejected+s.Rejected, c.TimedOut+s.TimedOut, limit)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(w)
	}
	for _, t := range r.Targets {
		fmt.Fprintf(w, "%-8s %s: %s — %s\n", t.Protection, t.What, t.Value, t.verdict())
	}
	return nil
}

// verdict is "met" or "NOT met".
func (t OverloadTarget) verdict() string {
	if t.Met {
		return "met"
	}
	return "NOT met"
}

// setup describes the scenario in one line.
func (r *OverloadReport) setup() string {
	sluice := "overload's defaults"
	if r.Sluice != "" {
		sluice = r.Sluice
	}
	return fmt.Sprintf("upstream: %d workers, lognormal service time (median %v, σ %.2f), queue %d: capacity %.0f requests/s · client timeout %v, no retries · fixed limit %d · sluice: %s · seed %d",
		r.Workers, r.Median, r.Sigma, r.Queue, r.Capacity, r.Timeout, r.Fixed, sluice, r.Seed)
}
