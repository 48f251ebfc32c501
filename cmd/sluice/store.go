package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/headroom"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/stack"
)

// env is what serve and proxy set up alike.
type env struct {
	log    *slog.Logger
	tls    *tls.Config
	opts   stack.Options
	w      *config.Watcher
	reg    *prometheus.Registry
	stack  *stack.Stack
	tracer *sdktrace.TracerProvider // nil when tracing is off
	stopGC func()                   // ends the collector's pacing by --gc-headroom-bytes

	stopPprof, stopHUP func() // end --pprof and the reloads on SIGHUP
}

// tracerProvider is e.tracer as server options take it: a nil interface when off.
func (e *env) tracerProvider() trace.TracerProvider {
	if e.tracer == nil {
		return nil
	}
	return e.tracer
}

// clockHook, when set by tests, is the clock of the stack (stack.Options.Clock) and of
// serve's server (server.Options.Now), so that a test decides at a virtual time. main
// never sets it.
var clockHook func() time.Time

// start sets up the env of a command, all but its listeners: it serves --pprof and reloads
// the configuration on SIGHUP. close undoes it.
func start(c *cli.Command) (*env, error) {
	log, err := newLogger(c, c.Root().ErrWriter)
	if err != nil {
		return nil, err
	}
	e := &env{log: log}
	if e.tracer, err = newTracerProvider(context.Background(), os.Getenv, c.Root().Writer); err != nil {
		return nil, cli.Exit(err.Error(), exitUsage)
	}
	if e.tls, err = listenerTLS(c, log); err != nil {
		return nil, err
	}
	if e.opts, err = readStoreFlags(c); err != nil {
		return nil, err
	}
	if e.w, err = config.NewWatcher(c.String("config"), config.WithLogger(log)); err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	e.reg = prometheus.NewRegistry()
	e.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// A Redis that is down at start is a store failure like any other; one that refuses
	// the URL's settings fails the command (redisstore.ConfigError).
	e.opts.Logger, e.opts.Registry, e.opts.ConnectRetry, e.opts.Clock = log, e.reg, true, clockHook
	if e.stack, err = stack.Open(e.w.Config(), e.opts); err == nil {
		if e.stopPprof, err = pprofFromFlags(c, log); err != nil {
			e.stack.Close()
		}
	}
	if err != nil {
		e.w.Close()
		e.closeTracer()
		return nil, err
	}
	e.stopGC = headroom.Start(c.Int64("gc-headroom-bytes"))
	e.stopHUP = reloadOnSIGHUP(e.w, log)
	return e, nil
}

// close stops what start started and closes the stack and the watcher.
func (e *env) close() {
	e.stopHUP()
	e.stopPprof()
	if err := e.stack.Close(); err != nil {
		e.log.Error("closing the store", slog.String("error", err.Error()))
	} else {
		e.log.Info("store closed")
	}
	e.w.Close()
	e.closeTracer()
	e.stopGC()
}

// closeTracer sends the spans still buffered, waiting at most 5 seconds.
func (e *env) closeTracer() {
	if e.tracer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.tracer.Shutdown(ctx); err != nil {
		e.log.Error("closing the tracer", slog.String("error", err.Error()))
	}
}

// readStoreFlags reads the store flags serve and proxy share into the stack's options.
func readStoreFlags(c *cli.Command) (stack.Options, error) {
	o := stack.Options{
		RedisURL: c.String("redis"),
		Deadline: c.Duration("deadline"),
		MaxKeys:  c.Int64("max-keys"),
		Sampling: c.Float("log-sampling"),

		MaxReservations: int(c.Int("max-reservations")),
		// serve's RLQS bound (proxy has no RLQS flags: 0).
		QuotaMaxClients: int(c.Int("rlqs-max-streams") * c.Int("rlqs-max-buckets-per-stream")),
	}
	if c.IsSet("deny-cache-bytes") {
		o.DenyCache.MaxBytes = c.Int64("deny-cache-bytes")
		o.DenyCache.Off = o.DenyCache.MaxBytes == 0
	}
	if c.IsSet("deny-cache-max-age") {
		o.DenyCache.MaxAge = c.Duration("deny-cache-max-age")
	}
	if err := redisstore.CheckURL(o.RedisURL); o.RedisURL != "" && err != nil {
		return o, usagef(c, "--redis: %v", err)
	}
	if s := c.String("failure-mode"); s != "" {
		m, err := sluice.ParseFailureMode(s)
		if err != nil {
			return o, cli.Exit(fmt.Sprintf("--failure-mode: %v", err), exitUsage)
		}
		o.FailureMode = m
	}
	minTTL := c.Duration("redis-min-ttl")
	for _, bad := range []struct {
		is  bool
		msg string
	}{
		{minTTL < 0, "--redis-min-ttl must not be negative"},
		{o.Deadline < 0, "--deadline must not be negative"},
		{c.Int64("deny-cache-bytes") < 0, "--deny-cache-bytes must not be negative (0 disables the cache)"},
		{c.Duration("deny-cache-max-age") <= 0, "--deny-cache-max-age must be positive"},
		{o.Sampling > 1 || (o.Sampling < 0 && o.Sampling != -1), "--log-sampling must be in [0, 1], or -1 for the default"},
	} {
		if bad.is {
			return o, cli.Exit(bad.msg, exitUsage)
		}
	}
	if minTTL > 0 {
		o.RedisOptions = append(o.RedisOptions, redisstore.WithMinTTL(minTTL))
	}
	return o, nil
}
