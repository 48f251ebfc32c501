package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

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
			"Patterns:\n" + strings.TrimRight(patterns.String(), "\n"),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "pattern", Value: "all", Usage: "patterns to run: all, or a comma-separated list of `NAME`s", Sources: cli.EnvVars("SLUICE_SIMULATE_PATTERN")},
			&cli.StringFlag{Name: "algorithms", Value: "all", Usage: "algorithms to run: all, or a comma-separated `LIST` (" + strings.Join(sim.AlgorithmNames(), ", ") + ")", Sources: cli.EnvVars("SLUICE_SIMULATE_ALGORITHMS")},
			&cli.StringFlag{Name: "format", Value: "table", Usage: "output `FORMAT` on stdout: table, json or csv", Sources: cli.EnvVars("SLUICE_SIMULATE_FORMAT")},
			&cli.StringFlag{Name: "out", Usage: "write the HTML report to this `FILE`", Sources: cli.EnvVars("SLUICE_SIMULATE_OUT")},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "random `SEED`; the same seed gives the same output", Sources: cli.EnvVars("SLUICE_SIMULATE_SEED")},
			&cli.FloatFlag{Name: "scale", Value: 1, Usage: "multiply the number of requests of every pattern by this `FACTOR`, in (0, 1000]; above 1, the cloudflare pattern's population gets a longer span instead (144: a day, about 400 million requests, Cloudflare's sample size)", Sources: cli.EnvVars("SLUICE_SIMULATE_SCALE")},
			&cli.StringFlag{Name: "redis", Usage: "decide through the Redis store at this `URL` (redis://host:port) with the simulation's clock, instead of in memory", Sources: cli.EnvVars("SLUICE_SIMULATE_REDIS_URL")},
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
