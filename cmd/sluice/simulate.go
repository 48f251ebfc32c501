package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice/sim"
)

// simulateEnv maps the simulator's flags to their environment variables. The simulator
// parses its own flags (sim.RunCLI); a variable that is set is passed as its flag ahead
// of the command line's, so the command line wins.
var simulateEnv = []struct{ flag, env string }{
	{"pattern", "SLUICE_SIMULATE_PATTERN"},
	{"algorithms", "SLUICE_SIMULATE_ALGORITHMS"},
	{"format", "SLUICE_SIMULATE_FORMAT"},
	{"out", "SLUICE_SIMULATE_OUT"},
	{"seed", "SLUICE_SIMULATE_SEED"},
	{"scale", "SLUICE_SIMULATE_SCALE"},
	{"redis", "SLUICE_SIMULATE_REDIS_URL"},
}

func simulateCommand() *cli.Command {
	var env []string
	for _, e := range simulateEnv {
		env = append(env, "--"+e.flag+" $"+e.env)
	}
	return &cli.Command{
		Name:      "simulate",
		Usage:     "run traffic patterns against the algorithms and report their accuracy",
		ArgsUsage: "[flags] (see sluice simulate --help)",
		Description: "Runs deterministic traffic patterns against the rate-limiting algorithms on a virtual\n" +
			"clock and measures how far each strays from an exact sliding window.\n\n" +
			"Environment: " + strings.Join(env, ", ") + ".",
		SkipFlagParsing: true,
		Action: func(ctx context.Context, c *cli.Command) error {
			var args []string
			for _, e := range simulateEnv {
				if v, ok := os.LookupEnv(e.env); ok {
					args = append(args, "--"+e.flag+"="+v)
				}
			}
			args = append(args, c.Args().Slice()...)
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
