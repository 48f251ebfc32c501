package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice/sim"
)

// simulateEnv names the environment variable of each of the simulator's flags
// (sim.Flags).
var simulateEnv = map[string]string{
	"pattern":    "SLUICE_SIMULATE_PATTERN",
	"algorithms": "SLUICE_SIMULATE_ALGORITHMS",
	"format":     "SLUICE_SIMULATE_FORMAT",
	"out":        "SLUICE_SIMULATE_OUT",
	"seed":       "SLUICE_SIMULATE_SEED",
	"scale":      "SLUICE_SIMULATE_SCALE",
	"redis":      "SLUICE_SIMULATE_REDIS_URL",
}

// simulateCommand offers sim.RunCLI's flags as the other commands offer theirs (double
// dashes, an environment variable each) and passes those given on to it, which checks
// their values.
func simulateCommand() *cli.Command {
	var flags []cli.Flag
	for _, f := range sim.Flags() {
		env, ok := simulateEnv[f.Name]
		if !ok {
			panic("simulate: no environment variable for sim flag " + f.Name)
		}
		flags = append(flags, &cli.StringFlag{Name: f.Name, Value: f.Value, Usage: f.Usage, Sources: cli.EnvVars(env)})
	}
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
		Flags: flags,
		Action: func(ctx context.Context, c *cli.Command) error {
			if c.Args().Present() {
				return cli.Exit(fmt.Sprintf("simulate takes no arguments, got %q", c.Args().First()), exitUsage)
			}
			var args []string
			for _, f := range sim.Flags() {
				if c.IsSet(f.Name) {
					args = append(args, "--"+f.Name+"="+c.String(f.Name))
				}
			}
			err := sim.RunCLI(ctx, args, c.Root().Writer, c.Root().ErrWriter)
			switch {
			case errors.Is(err, flag.ErrHelp):
				return nil
			case errors.Is(err, sim.ErrUsage):
				return cli.Exit("", exitUsage)
			}
			return err
		},
	}
}
