// Command sluice runs the sluice rate limit service and its tools.
//
//	sluice serve     the rate limit service: HTTP JSON API on :8080, Envoy's rate limit
//	                 service (gRPC) on :8081, on the in-memory store unless Redis is named
//	sluice proxy     a reverse proxy that applies sluice policies in front of an upstream
//	sluice check     ask a running server whether a request would pass, or (--health,
//	                 --ready) whether it is live or ready: a container's health check
//	sluice key       print the identity and store keys a request would be counted under
//	sluice override  set, read, list and remove the limits a running server applies per identity
//	sluice simulate  run traffic patterns against the algorithms and report their accuracy
//	sluice version   print the version
//
// Every flag can also be set with the environment variable shown in its --help; a flag on
// the command line wins. A command line that cannot be parsed exits 2 with one line on
// stderr (usage.go); check's exit statuses are in its --help.
//
// serve and proxy decide through the layers [stack.Open] builds. They start while their
// Redis is down (the failure mode answers, /readyz says why), but exit 1 at start when
// Redis refuses the URL's settings: no retry fixes those.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v3"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args, os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK      = 0
	exitError   = 1
	exitUsage   = 2 // a command line that cannot be parsed: one line on stderr says why
	exitDenied  = 3 // sluice check: the request would be denied
	exitNoMatch = 4 // sluice check: no limit applies; allowed, uncounted
)

// run runs the command line args and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	app := newApp(stdout, stderr)
	var notFound error
	unixConventions(app, &notFound)
	err := app.Run(ctx, args)
	if err == nil {
		err = notFound
	}
	if err == nil {
		return exitOK
	}
	if ue, ok := errors.AsType[*usageError](err); ok {
		fmt.Fprintln(stderr, ue.Error())
		return exitUsage
	}
	if ec, ok := errors.AsType[cli.ExitCoder](err); ok {
		if msg := ec.Error(); msg != "" {
			fmt.Fprintln(stderr, "sluice:", msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, "sluice:", err)
	return exitError
}

func newApp(stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:    "sluice",
		Usage:   "a rate limiter: service, gateway and tools",
		Version: version(),
		Description: "Every flag can also be set with the environment variable shown beside it; a flag\n" +
			"on the command line wins. Start with `sluice serve`: it runs on the in-memory\n" +
			"store with a built-in example configuration.",
		Writer:                stdout,
		ErrWriter:             stderr,
		ExitErrHandler:        func(context.Context, *cli.Command, error) {}, // run reports errors
		Commands:              []*cli.Command{serveCommand(), proxyCommand(), checkCommand(), keyCommand(), overrideCommand(), simulateCommand(), versionCommand()},
		EnableShellCompletion: false,
	}
}
