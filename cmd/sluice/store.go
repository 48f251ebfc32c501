package main

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/stack"
)

// startStore is the set-up serve and proxy share: read the store flags, start the
// configuration watcher, and build the decision stack (package stack) on a fresh metrics
// registry. The caller closes the watcher and the stack.
func startStore(c *cli.Command, log *slog.Logger) (stack.Options, *config.Watcher, *prometheus.Registry, *stack.Stack, error) {
	o, err := readStoreFlags(c)
	if err != nil {
		return o, nil, nil, nil, err
	}
	w, err := config.NewWatcher(c.String("config"), config.WithLogger(log))
	if err != nil {
		return o, nil, nil, nil, fmt.Errorf("configuration: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o.Logger, o.Registry = log, reg
	// A Redis that is down when the service starts is a store failure like any other:
	// the service starts, the failure mode answers, /readyz reports it, and the store
	// connects in the background.
	o.ConnectRetry = true
	st, err := stack.Open(w.Config(), o)
	if err != nil {
		w.Close()
		return o, nil, nil, nil, err
	}
	return o, w, reg, st, nil
}

// readStoreFlags reads the store flags serve and proxy share into the stack's options.
func readStoreFlags(c *cli.Command) (stack.Options, error) {
	o := stack.Options{
		RedisURL: c.String("redis"),
		Deadline: c.Duration("deadline"),
		MaxKeys:  c.Int64("max-keys"),
		Sampling: c.Float("log-sampling"),
	}
	if c.IsSet("deny-cache-bytes") {
		o.DenyCache.MaxBytes = c.Int64("deny-cache-bytes")
		o.DenyCache.Off = o.DenyCache.MaxBytes == 0
	}
	if c.IsSet("deny-cache-max-age") {
		o.DenyCache.MaxAge = c.Duration("deny-cache-max-age")
	}
	if s := c.String("failure-mode"); s != "" {
		m, err := sluice.ParseFailureMode(s)
		if err != nil {
			return o, cli.Exit(fmt.Sprintf("--failure-mode: %v", err), exitUsage)
		}
		o.FailureMode = m
	}
	if o.Deadline < 0 {
		return o, cli.Exit("--deadline must not be negative", exitUsage)
	}
	if c.Int64("deny-cache-bytes") < 0 {
		return o, cli.Exit("--deny-cache-bytes must not be negative (0 disables the cache)", exitUsage)
	}
	if c.Duration("deny-cache-max-age") <= 0 {
		return o, cli.Exit("--deny-cache-max-age must be positive", exitUsage)
	}
	if o.Sampling > 1 || (o.Sampling < 0 && o.Sampling != -1) {
		return o, cli.Exit("--log-sampling must be in [0, 1], or -1 for the default", exitUsage)
	}
	return o, nil
}
