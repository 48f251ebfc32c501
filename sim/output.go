package sim

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes the results as an indented JSON list, one object per (pattern,
// algorithm), with the fields documented on Result. The same seed gives the same bytes.
func (r *Report) WriteJSON(w io.Writer) error {
	results := r.Results
	if results == nil {
		results = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

// csvHeader is the first CSV row; WriteCSV's columns are in this order.
var csvHeader = []string{
	"pattern", "algorithm", "limit", "keys", "requests", "admitted", "denied",
	"max_window_ratio", "false_allows", "false_denies", "false_allow_rate", "false_deny_rate",
	"rate_error", "retry_after_checks", "retry_after_late", "retry_after_early",
	"retry_after_honest", "state_bytes_per_key",
}

// WriteCSV writes the results as CSV with a header row; rate_error is empty where it does
// not apply.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHeader)
	for _, x := range r.Results {
		rateErr := ""
		if x.RateError != nil {
			rateErr = ftoa(*x.RateError)
		}
		cw.Write([]string{
			x.Pattern, x.Algorithm.String(), x.Limit, strconv.Itoa(x.Keys),
			itoa(x.Requests), itoa(x.Admitted), itoa(x.Denied), ftoa(x.MaxWindowRatio),
			itoa(x.FalseAllows), itoa(x.FalseDenies), ftoa(x.FalseAllowRate), ftoa(x.FalseDenyRate),
			rateErr, itoa(x.RetryAfterChecks), itoa(x.RetryAfterLate), itoa(x.RetryAfterEarly),
			strconv.FormatBool(x.RetryAfterHonest), ftoa(x.StateBytesPerKey),
		})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("sim: writing CSV: %w", err)
	}
	return nil
}

// WriteTable writes the results as aligned text tables for a terminal.
func (r *Report) WriteTable(w io.Writer) error {
	// One tabwriter for all: a line without a tab ends the table above it.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pattern\talgorithm\trequests\tadmitted\tdenied\tmax window\tfalse allow\tfalse deny\trate error\tretry-after\tstate B/key\t")
	prev := ""
	for _, x := range r.Results {
		name := x.Pattern
		if name == prev {
			name = ""
		}
		prev = x.Pattern
		rateErr := "-"
		if x.RateError != nil {
			rateErr = pct(*x.RateError)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.3f×\t%s\t%s\t%s\t%s\t%s\t\n",
			name, x.Algorithm, x.Requests, x.Admitted, x.Denied, x.MaxWindowRatio,
			pct(x.FalseAllowRate), pct(x.FalseDenyRate), rateErr, honesty(x), bytesPerKey(x.StateBytesPerKey))
	}
	if len(r.Estimates) > 0 {
		fmt.Fprintf(tw, "\nThe sliding window counter as a rate estimator, every request counted (Cloudflare published %s wrong, %s average difference on %d million requests):\n\n",
			pct(CloudflareWrongRate), pct(CloudflareMeanDifference), CloudflareRequests/1_000_000)
		fmt.Fprintln(tw, "pattern\trequests\twrong (sluice)\tavg difference (sluice)\twrong (as published)\tavg difference (as published)\t")
		for _, e := range r.Estimates {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", e.Pattern, e.Requests,
				pct(e.Discrete.WrongRate), pct(e.Discrete.MeanDifference), pct(e.Continuous.WrongRate), pct(e.Continuous.MeanDifference))
		}
		for _, a := range r.Populations {
			a.writeTable(tw)
		}
	}
	return tw.Flush()
}

// writeTable writes the population's figures beside Cloudflare's, and the sensitivity
// table.
func (a PopulationAccuracy) writeTable(tw io.Writer) {
	fmt.Fprintf(tw, "\nBeside Cloudflare's published accuracy: the whole population of the %s pattern, %s sources, %s requests over %s, threshold %s:\n\n",
		a.Pattern, thousands(int64(a.Sources)), thousands(a.Requests), humanDuration(a.Duration), a.Limit)
	fmt.Fprintln(tw, "\tCloudflare (published)\tsluice\tas published\t")
	fmt.Fprintf(tw, "requests\t%s\t%s\t%s\t\n", thousands(CloudflareRequests), thousands(a.Requests), thousands(a.Requests))
	fmt.Fprintf(tw, "wrongly allowed or rate limited\t%s\t%s\t%s\t\n", pct(CloudflareWrongRate), pct(a.Discrete.WrongRate), pct(a.Continuous.WrongRate))
	fmt.Fprintf(tw, "average difference\t%s\t%s\t%s\t\n", pct(CloudflareMeanDifference), pct(a.Discrete.MeanDifference), pct(a.Continuous.MeanDifference))
	fmt.Fprintf(tw, "sources let through above the threshold\t%d, < %s above\t%s\t%s\t\n", CloudflareMissedSources, pct(CloudflareMissedOvershoot), missed(a.Discrete), missed(a.Continuous))
	fmt.Fprintf(tw, "sources limited, never above it\tnone\t%d of %d\t%d of %d\t\n", a.Discrete.FalseFlagged, a.Discrete.Flagged, a.Continuous.FalseFlagged, a.Continuous.Flagged)
	fmt.Fprintf(tw, "\n%s of these requests come from sources within ±50%% of the threshold. Among the requests of %s such sources\n"+
		"(%s requests), the estimator errs on %s, with an average difference of %s; on the other sources' requests on %s, with %s.\n",
		pct(a.NearShare), thousands(int64(a.Near.Sources)), thousands(a.Near.Requests), pct(a.Near.Discrete.WrongRate),
		pct(a.Near.Discrete.MeanDifference), pct(a.Rest.Discrete.WrongRate), pct(a.Rest.Discrete.MeanDifference))
	fmt.Fprintf(tw, "\nBy share of requests from near-threshold sources:\n\n")
	fmt.Fprintln(tw, "near-threshold share\twrong (sluice)\tavg difference (sluice)\twrong (as published)\tavg difference (as published)\t")
	for _, s := range a.Sensitivity {
		share := pct(s.NearShare)
		if s.Population {
			share += " (this population's)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", share, pct(s.Discrete.WrongRate), pct(s.Discrete.MeanDifference), pct(s.Continuous.WrongRate), pct(s.Continuous.MeanDifference))
	}
	fmt.Fprintf(tw, "\nCloudflare's %s wrong corresponds to a near-threshold share of %s; its %s average difference to %s.\n",
		pct(CloudflareWrongRate), shareOrNone(a.ImpliedNearShare), pct(CloudflareMeanDifference), shareOrNone(a.DifferenceNearShare))
}

// missed describes the sources an estimator let through despite traffic above the
// threshold.
func missed(e PopulationEstimator) string {
	if e.Missed == 0 {
		return fmt.Sprintf("0 of %d", e.Exceeded)
	}
	return fmt.Sprintf("%d of %d, ≤ %s above", e.Missed, e.Exceeded, pct(e.MissedPeak-1))
}

func shareOrNone(s float64) string {
	if s == 0 {
		return "no share"
	}
	return pct(s)
}

func honesty(x Result) string {
	switch {
	case x.RetryAfterChecks == 0:
		return "-"
	case x.RetryAfterHonest && x.RetryAfterEarly == 0:
		return fmt.Sprintf("exact (%d)", x.RetryAfterChecks)
	case x.RetryAfterHonest:
		return fmt.Sprintf("honest, %d early", x.RetryAfterEarly)
	}
	return fmt.Sprintf("%d of %d LATE", x.RetryAfterLate, x.RetryAfterChecks)
}

func itoa(v int64) string   { return strconv.FormatInt(v, 10) }
func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// pct formats a fraction as a percentage: one decimal from 1% up, three significant digits
// below (0.479%, 0.003%), without trailing zeros.
func pct(f float64) string {
	v := 100 * f
	switch {
	case v == 0:
		return "0%"
	case v >= 1:
		return fmt.Sprintf("%.1f%%", v)
	}
	prec := 2 - int(math.Floor(math.Log10(v)))
	s := strconv.FormatFloat(v, 'f', prec, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + "%"
}

// thousands formats n with comma separators: 387,183.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func bytesPerKey(b float64) string {
	if b == float64(int64(b)) {
		return strconv.FormatInt(int64(b), 10)
	}
	return fmt.Sprintf("%.1f", b)
}
