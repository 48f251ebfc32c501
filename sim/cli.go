package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/sluicehq/sluice"
)

// ErrUsage is returned by RunCLI for a command line it cannot parse (the message and the
// usage have already been written to stderr). A CLI exits with status 2 for it.
var ErrUsage = errors.New("sim: usage")

// RunCLI is `sluice simulate`: it parses args (the arguments after "simulate"), runs the
// simulation, writes the results to stdout in the chosen format and, with --out, the HTML
// report to a file.
//
//	sluice simulate [--pattern NAME[,NAME...]|all] [--algorithms LIST|all]
//	                [--format table|json|csv] [--out report.html] [--seed N]
//	                [--scale F] [--redis URL]
//
// A progress bar is drawn on stderr, when it is a terminal, for runs taking more than a
// second. -h prints the usage and the pattern names and returns flag.ErrHelp.
func RunCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	v := map[string]*string{}
	for _, f := range Flags() {
		v[f.Name] = fs.String(f.Name, f.Value, f.Usage)
	}
	pattern, algorithms, format, out, redisURL := v["pattern"], v["algorithms"], v["format"], v["out"], v["redis"]
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: sluice simulate [flags]\n\nRuns deterministic traffic patterns against rate-limiting algorithms on a virtual clock\nand measures how far each strays from an exact sliding window.\n\nflags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\npatterns:\n")
		for _, p := range Patterns(1) {
			fmt.Fprintf(fs.Output(), "  %-12s %s\n", p.Name, p.Description)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	usage := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "sluice simulate: "+format+"\n", a...)
		fs.Usage()
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	if fs.NArg() > 0 {
		return usage("unexpected argument %q", fs.Arg(0))
	}
	seed, err := strconv.ParseUint(*v["seed"], 10, 64)
	if err != nil {
		return usage("--seed must be an unsigned integer, got %q", *v["seed"])
	}
	scale, err := strconv.ParseFloat(*v["scale"], 64)
	if err != nil || !(scale > 0) || scale > 1000 {
		return usage("--scale must be in (0, 1000], got %q", *v["scale"])
	}
	write, ok := map[string]func(*Report, io.Writer) error{
		"table": (*Report).WriteTable,
		"json":  (*Report).WriteJSON,
		"csv":   (*Report).WriteCSV,
	}[*format]
	if !ok {
		return usage("--format must be table, json or csv, got %q", *format)
	}
	patterns, err := SelectPatterns(*pattern, scale)
	if err != nil {
		return usage("%v", err)
	}
	algs, err := SelectAlgorithms(*algorithms)
	if err != nil {
		return usage("%v", err)
	}

	cfg := Config{Patterns: patterns, Algorithms: algs, Seed: seed}
	if *redisURL != "" {
		cfg.Store, cfg.StoreName = RedisStore(*redisURL), "redis"
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
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		if err := report.WriteHTML(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("sim: %w", err)
		}
	}
	return write(report, stdout)
}

// Flag is one of RunCLI's flags: a CLI that parses its own flags can offer these and pass
// the ones given on to RunCLI as --name=value.
type Flag struct {
	Name  string
	Value string // the default
	Usage string
}

// Flags returns RunCLI's flags, in the order its usage lists them.
func Flags() []Flag {
	return []Flag{
		{"pattern", "all", "patterns to run: all, or a comma-separated list of `NAME`s"},
		{"algorithms", "all", "algorithms to run: all, or a comma-separated `LIST` (" + strings.Join(algorithmNames(), ", ") + ")"},
		{"format", "table", "output `FORMAT` on stdout: table, json or csv"},
		{"out", "", "write the HTML report to this `FILE`"},
		{"seed", "1", "random `SEED`; the same seed gives the same output"},
		{"scale", "1", "multiply the number of requests of every pattern by this `FACTOR` (> 0); above 1, the cloudflare pattern's population gets a longer span instead (144: a day, about 400 million requests, Cloudflare's sample size)"},
		{"redis", "", "decide through the Redis store at this `URL` (redis://host:port) with the simulation's clock, instead of in memory"},
	}
}

func algorithmNames() []string {
	var out []string
	for _, a := range sluice.Algorithms() {
		out = append(out, a.String())
	}
	return out
}

// progress draws a progress bar on w once a run has lasted longer than delay, so that
// short runs print nothing.
type progress struct {
	w     io.Writer
	now   func() time.Time
	start time.Time
	delay time.Duration
	mu    sync.Mutex
	bar   *progressbar.ProgressBar
}

// newProgress returns a progress bar on w that appears once delay has passed on clock now.
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
