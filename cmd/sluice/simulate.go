package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice/overload"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/sim"
)

// simulateCommand is sim.RunCLI behind flags like every other command's: double dashes,
// an environment variable each, and a usage error of one line for a value it cannot take.
func simulateCommand() *cli.Command {
	var patterns strings.Builder
	for _, p := range sim.Patterns(1) {
		fmt.Fprintf(&patterns, "  %-12s %s\n", p.Name, p.Description)
	}
	return &cli.Command{
		Name:      "simulate",
		Usage:     "run traffic patterns against the algorithms and report their accuracy",
		ArgsUsage: " ",
		Description: "Runs deterministic traffic patterns against the rate-limiting algorithms on a virtual\n" +
			"clock and measures how far each strays from an exact sliding window: a table on\n" +
			"stdout (--format), and with --out an HTML report that opens with a chart of every\n" +
			"run's worst rolling-window ratio.\n\n" +
			"  sluice simulate --out report.html\n" +
			"  sluice simulate --format json --pattern boundary,cdn-batch --algorithms fixed_window,sliding_window\n\n" +
			"`sluice simulate overload` runs the overload scenario instead: see its --help.\n\n" +
			"Patterns:\n" + strings.TrimRight(patterns.String(), "\n"),
		Commands: []*cli.Command{simulateOverloadCommand()},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "pattern", Value: "all", Usage: "patterns to run: all, or a comma-separated list of `NAME`s", Sources: cli.EnvVars("SLUICE_SIMULATE_PATTERN"), Local: true},
			&cli.StringFlag{Name: "algorithms", Value: "all", Usage: "algorithms to run: all, or a comma-separated `LIST` (" + strings.Join(sim.AlgorithmNames(), ", ") + ")", Sources: cli.EnvVars("SLUICE_SIMULATE_ALGORITHMS"), Local: true},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "output `FORMAT` on stdout: table, json or csv", Sources: cli.EnvVars("SLUICE_SIMULATE_FORMAT"), Local: true},
			&cli.StringFlag{Name: "out", Usage: "write the HTML report to this `FILE`", Sources: cli.EnvVars("SLUICE_SIMULATE_OUT"), Local: true},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random `SEED`; the same seed gives the same output", Sources: cli.EnvVars("SLUICE_SIMULATE_SEED"), Local: true},
			&cli.FloatFlag{Name: "scale", Value: 1, Usage: "multiply the number of requests of every pattern by this `FACTOR`, in (0, 1000]; above 1, the cloudflare pattern's population gets a longer span instead (144: a day, about 400 million requests, Cloudflare's sample size)", Sources: cli.EnvVars("SLUICE_SIMULATE_SCALE"), Local: true},
			&cli.StringFlag{Name: "redis", Usage: "decide through the Redis store at this `URL` (redis://host:port) with the simulation's clock, instead of in memory", Sources: cli.EnvVars("SLUICE_SIMULATE_REDIS_URL"), Local: true},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			if err := redisstore.CheckURL(c.String("redis")); c.String("redis") != "" && err != nil {
				return usagef(c, "--redis: %v", err)
			}
			err := sim.RunCLI(ctx, sim.CLI{
				Pattern: c.String("pattern"), Algorithms: c.String("algorithms"), Format: c.String("format"),
				Out: c.String("out"), Redis: c.String("redis"), Seed: c.Uint64("seed"), Scale: c.Float("scale"),
			}, c.Root().Writer, c.Root().ErrWriter)
			if errors.Is(err, sim.ErrUsage) {
				return usagef(c, "%s", strings.TrimPrefix(err.Error(), sim.ErrUsage.Error()+": "))
			}
			return err
		},
	}
}

// simulateOverloadCommand is sim.RunOverloadCLI: bench/cmd/overload's scenario on the
// virtual clock.
func simulateOverloadCommand() *cli.Command {
	d := sim.DefaultOverload()
	env := func(name string) cli.ValueSourceChain { return cli.EnvVars("SLUICE_SIMULATE_OVERLOAD_" + name) }
	return &cli.Command{
		Name:      "overload",
		Usage:     "run an overload scenario against no protection, a fixed limit and sluice's overload limiter",
		ArgsUsage: " ",
		Description: "Runs bench/cmd/overload's scenario on a virtual clock, in a fraction of a second and\n" +
			"the same for a seed: an upstream of --workers workers with lognormal service times\n" +
			"(--median, --sigma) and a queue of --queue, which serves a request to the end even\n" +
			"when its client has given up (--timeout); an open-loop load stepped through --steps\n" +
			"multiples of its capacity, --step each, half critical and half sheddable (or critical\n" +
			"capped at --critical-max times the capacity); then the upstream slows to half speed\n" +
			"while the last step's load goes on for --slow. The same arrivals meet each of\n" +
			"--protections: none, fixed (at most --fixed in flight) and sluice (package overload,\n" +
			"its defaults unless the limiter's flags say otherwise). It reports per phase the\n" +
			"goodput, the success rate and p50/p99 latency of each class, the requests shed and\n" +
			"the limit: a table on stdout (--format), and with --out an HTML report with the limit\n" +
			"over time; then issue 42's targets, met or not, for each protection (--settle and\n" +
			"--swing set the limit's).\n\n" +
			"  sluice simulate overload --out overload.html\n" +
			"  sluice simulate overload --critical-max 0.5 --protections fixed,sluice --format csv\n",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "workers", Value: d.Workers, Usage: "the upstream's workers: requests served at once", Sources: env("WORKERS")},
			&cli.DurationFlag{Name: "median", Value: d.Median, Usage: "the median service time at full speed", Sources: env("MEDIAN")},
			&cli.FloatFlag{Name: "sigma", Value: d.Sigma, Usage: "the lognormal service time's σ (of its logarithm), in [0, 3]", Sources: env("SIGMA")},
			&cli.IntFlag{Name: "queue", Value: d.Queue, Usage: "requests waiting for a worker beyond which the upstream answers 503", Sources: env("QUEUE")},
			&cli.StringFlag{Name: "steps", Value: "0.5,1,2,4", Usage: "offered loads, a comma-separated `LIST` of multiples of the capacity", Sources: env("STEPS")},
			&cli.DurationFlag{Name: "step", Value: d.Step, Usage: "how long each load step lasts", Sources: env("STEP")},
			&cli.DurationFlag{Name: "slow", Value: d.Slow, Usage: "how long the last step's load goes on after the upstream halves its speed (0: it never does)", Sources: env("SLOW")},
			&cli.FloatFlag{Name: "critical-max", Usage: "cap the critical arrivals at this multiple of the capacity, the rest sheddable (0: half of every step is critical)", Sources: env("CRITICAL_MAX")},
			&cli.DurationFlag{Name: "timeout", Value: d.Timeout, Usage: "each client's timeout; clients do not retry", Sources: env("TIMEOUT")},
			&cli.StringFlag{Name: "protections", Value: "all", Usage: "protections to compare: all, or a comma-separated `LIST` of none, fixed, sluice", Sources: env("PROTECTIONS")},
			&cli.IntFlag{Name: "fixed", Usage: "the fixed protection's limit (0: --workers)", Sources: env("FIXED")},
			&cli.IntFlag{Name: "min-limit", Usage: "sluice: overload's MinLimit (0: its default)", Sources: env("MIN_LIMIT")},
			&cli.IntFlag{Name: "max-limit", Usage: "sluice: overload's MaxLimit (0: its default)", Sources: env("MAX_LIMIT")},
			&cli.IntFlag{Name: "initial-limit", Usage: "sluice: overload's InitialLimit (0: its default)", Sources: env("INITIAL_LIMIT")},
			&cli.DurationFlag{Name: "window", Usage: "sluice: overload's Window, how often the limit is recomputed (0: its default)", Sources: env("WINDOW")},
			&cli.IntFlag{Name: "min-samples", Usage: "sluice: overload's MinSamples, latencies a window needs (0: its default)", Sources: env("MIN_SAMPLES")},
			&cli.IntFlag{Name: "long-window", Usage: "sluice: overload's LongWindow, windows the long-term latency averages (0: its default)", Sources: env("LONG_WINDOW")},
			&cli.IntFlag{Name: "tolerance", Usage: "sluice: overload's Tolerance, percent (0: its default)", Sources: env("TOLERANCE")},
			&cli.IntFlag{Name: "headroom", Usage: "sluice: overload's Headroom, requests (0: its default)", Sources: env("HEADROOM")},
			&cli.DurationFlag{Name: "remeasure", Usage: "sluice: overload's Remeasure (0: its default; < 0: never)", Sources: env("REMEASURE")},
			&cli.IntFlag{Name: "critical-reserve", Usage: "sluice: overload's CriticalReserve, percent (0: its default; < 0: none)", Sources: env("CRITICAL_RESERVE")},
			&cli.IntFlag{Name: "default-reserve", Usage: "sluice: overload's DefaultReserve, percent", Sources: env("DEFAULT_RESERVE")},
			&cli.DurationFlag{Name: "max-wait", Usage: "sluice: overload's MaxWait, how long a critical request waits for a permit (0: its default; < 0: never)", Sources: env("MAX_WAIT")},
			&cli.IntFlag{Name: "max-queue", Usage: "sluice: overload's MaxQueue (0: its default)", Sources: env("MAX_QUEUE")},
			&cli.DurationFlag{Name: "sample", Value: d.Sample, Usage: "how often the limit and the requests in flight are sampled", Sources: env("SAMPLE")},
			&cli.DurationFlag{Name: "settle", Value: d.SettleWithin, Usage: "target: after the upstream halves, the limit comes within ±--swing of where it ends within this long", Sources: env("SETTLE")},
			&cli.FloatFlag{Name: "swing", Value: d.Swing, Usage: "target: the limit's largest swing once settled, a fraction", Sources: env("SWING")},
			&cli.Uint64Flag{Name: "seed", Value: d.Seed, Usage: "random `SEED`; the same seed gives the same output", Sources: env("SEED")},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "output `FORMAT` on stdout: table, json or csv", Sources: env("FORMAT")},
			&cli.StringFlag{Name: "out", Usage: "write the HTML report to this `FILE`", Sources: env("OUT")},
		},
		Action: func(ctx context.Context, c *cli.Command) error {
			err := sim.RunOverloadCLI(ctx, sim.OverloadCLI{
				Scenario: sim.OverloadConfig{
					Workers: int(c.Int("workers")), Median: c.Duration("median"), Sigma: c.Float("sigma"), Queue: int(c.Int("queue")),
					Step: c.Duration("step"), Slow: c.Duration("slow"), CriticalMax: c.Float("critical-max"), Timeout: c.Duration("timeout"),
					Fixed: int(c.Int("fixed")), Sample: c.Duration("sample"), Seed: c.Uint64("seed"),
					SettleWithin: c.Duration("settle"), Swing: c.Float("swing"),
					Limiter: overload.Config{
						MinLimit: int(c.Int("min-limit")), MaxLimit: int(c.Int("max-limit")), InitialLimit: int(c.Int("initial-limit")),
						Window: c.Duration("window"), MinSamples: int(c.Int("min-samples")), LongWindow: int(c.Int("long-window")),
						Tolerance: int(c.Int("tolerance")), Headroom: int(c.Int("headroom")), Remeasure: c.Duration("remeasure"),
						CriticalReserve: int(c.Int("critical-reserve")), DefaultReserve: int(c.Int("default-reserve")),
						MaxWait: c.Duration("max-wait"), MaxQueue: int(c.Int("max-queue")),
					},
				},
				Steps: c.String("steps"), Protections: c.String("protections"), Format: c.String("format"), Out: c.String("out"),
			}, c.Root().Writer)
			if errors.Is(err, sim.ErrUsage) {
				return usagef(c, "%s", strings.TrimPrefix(err.Error(), sim.ErrUsage.Error()+": "))
			}
			return err
		},
	}
}
