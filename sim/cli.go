package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/sluicehq/sluice/store"
)

// ErrUsage is wrapped by RunCLI's error for an option it cannot take (an unknown
// pattern or algorithm, a scale out of range); a CLI exits with status 2 for it.
var ErrUsage = errors.New("sim: usage")

// CLI holds the options of `sluice simulate`, one per flag.
type CLI struct {
	// Pattern is "all" (or empty), or a comma-separated list of pattern names.
	Pattern string
	// Algorithms is "all" (or empty), or a comma-separated list of the algorithms
	// AlgorithmNames lists.
	Algorithms string
	// Format is the output on stdout: "table" (or empty), "json" or "csv".
	Format string
	// Out, when not empty, is the file the HTML report is written to.
	Out string
	// Redis, when not empty, is the URL of the Redis store to decide through (RedisStore).
	Redis string
	// Seed seeds the random traffic: the same seed gives the same output.
	Seed uint64
	// Scale multiplies every pattern's requests, in (0, 1000] (1: as described).
	Scale float64
}

// RunCLI is `sluice simulate`: it runs the simulation o asks for, writes the results to
// stdout in o.Format and, with o.Out, the HTML report to a file. A progress bar is drawn
// on stderr, when it is a terminal, for runs longer than a second. An option it cannot
// take is an error wrapping ErrUsage, returned before anything runs.
func RunCLI(ctx context.Context, o CLI, stdout, stderr io.Writer) error {
	usage := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	if !(o.Scale > 0) || o.Scale > 1000 {
		return usage("--scale must be in (0, 1000], got %v", o.Scale)
	}
	write, ok := map[string]func(*Report, io.Writer) error{
		"":      (*Report).WriteTable,
		"table": (*Report).WriteTable,
		"json":  (*Report).WriteJSON,
		"csv":   (*Report).WriteCSV,
	}[o.Format]
	if !ok {
		return usage("--format must be table, json or csv, got %q", o.Format)
	}
	patterns, err := SelectPatterns(o.Pattern, o.Scale)
	if err != nil {
		return usage("--pattern: %v", err)
	}
	algs, err := SelectAlgorithms(o.Algorithms)
	if err != nil {
		return usage("--algorithms: %v", err)
	}

	cfg := Config{Patterns: patterns, Algorithms: algs, Seed: o.Seed}
	if o.Redis != "" {
		cfg.Store, cfg.StoreName = RedisStore(o.Redis), "redis"
	}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar := newProgress(stderr, time.Second, time.Now)
		defer bar.finish()
		cfg.Progress = bar.update
	}
	report, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := writeHTMLFile(o.Out, report); err != nil {
		return err
	}
	return write(report, stdout)
}

// AlgorithmNames are the names of the algorithms a simulation runs: the six rate
// algorithms (store.Algorithms); a concurrency limit has no window to be measured against.
func AlgorithmNames() []string {
	var out []string
	for _, a := range store.Algorithms() {
		out = append(out, a.String())
	}
	return out
}

// progress draws a progress bar on w once a run has lasted longer than delay.
type progress struct {
	w     io.Writer
	now   func() time.Time
	start time.Time
	delay time.Duration
	mu    sync.Mutex
	bar   *progressbar.ProgressBar
}

func newProgress(w io.Writer, delay time.Duration, now func() time.Time) *progress {
	return &progress{w: w, now: now, start: now(), delay: delay}
}

// update is a Config.Progress.
func (p *progress) update(done, total int64) {
	if p.now().Sub(p.start) < p.delay {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription("simulating"),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("decisions"),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
	// Closed-loop patterns make more requests than their demand: grow the total.
	if done > p.bar.GetMax64() {
		p.bar.ChangeMax64(done)
	}
	p.bar.Set64(done)
}

func (p *progress) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		p.bar.Finish() // clears the line
	}
}

// OverloadCLI holds the options of `sluice simulate overload`, one per flag.
type OverloadCLI struct {
	// Scenario is the run, but for its Steps and Protections, which are read from the
	// strings below. A Fixed of 0 is Workers.
	Scenario OverloadConfig
	// Steps is a comma-separated list of offered loads, multiples of the capacity.
	Steps string
	// Protections is "all" (or empty), or a comma-separated list of none, fixed and sluice.
	Protections string
	// Format is the output on stdout: "table" (or empty), "json" or "csv".
	Format string
	// Out, when not empty, is the file the HTML report is written to.
	Out string
}

// RunOverloadCLI is `sluice simulate overload`: it runs the overload scenario o asks
// for, writes the results to stdout in o.Format and, with o.Out, the HTML report to a
// file. An option it cannot take is an error wrapping ErrUsage, returned before anything
// runs.
func RunOverloadCLI(ctx context.Context, o OverloadCLI, stdout io.Writer) error {
	usage := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	write, ok := map[string]func(*OverloadReport, io.Writer) error{
		"":      (*OverloadReport).WriteTable,
		"table": (*OverloadReport).WriteTable,
		"json":  (*OverloadReport).WriteJSON,
		"csv":   (*OverloadReport).WriteCSV,
	}[o.Format]
	if !ok {
		return usage("--format must be table, json or csv, got %q", o.Format)
	}
	c := o.Scenario
	c.Steps = nil
	for s := range strings.SplitSeq(o.Steps, ",") {
		load, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return usage("--steps: %q is not a load", s)
		}
		c.Steps = append(c.Steps, load)
	}
	c.Protections = slices.Clone(OverloadProtections)
	if o.Protections != "" && o.Protections != "all" {
		c.Protections = nil
		for p := range strings.SplitSeq(o.Protections, ",") {
			c.Protections = append(c.Protections, strings.TrimSpace(p))
		}
	}
	if c.Fixed == 0 {
		c.Fixed = c.Workers
	}
	report, err := RunOverload(ctx, c)
	if err != nil {
		return err
	}
	if err := writeHTMLFile(o.Out, report); err != nil {
		return err
	}
	return write(report, stdout)
}

// writeHTMLFile writes r's HTML report to path, whole or not at all; an empty path
// writes nothing.
func writeHTMLFile(path string, r interface{ WriteHTML(io.Writer) error }) error {
	if path == "" {
		return nil
	}
	var html bytes.Buffer
	if err := r.WriteHTML(&html); err != nil {
		return err
	}
	if err := os.WriteFile(path, html.Bytes(), 0o666); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}
