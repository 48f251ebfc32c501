package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"slices"

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice/server"
)

func proxyCommand() *cli.Command {
	own := []cli.Flag{
		&cli.StringFlag{Name: "upstream", Usage: "the `URL` allowed requests are forwarded to (required)", Sources: cli.EnvVars("SLUICE_UPSTREAM")},
		&cli.StringFlag{Name: "listen", Value: ":8000", Usage: "listen `ADDR`ess of the proxy", Sources: cli.EnvVars("SLUICE_PROXY_ADDR")},
		&cli.StringFlag{Name: "admin", Usage: "listen `ADDR`ess for /healthz, /readyz and /metrics (and the JSON API on the same store); empty disables it", Sources: cli.EnvVars("SLUICE_PROXY_ADMIN_ADDR")},
		&cli.IntFlag{Name: "max-connections", Usage: fmt.Sprintf("the most client connections open at once; one more is closed as soon as it is accepted, counted in sluice_proxy_connections_refused_total (0: %d; -1: unbounded)", server.DefaultProxyMaxConnections), Sources: cli.EnvVars("SLUICE_PROXY_MAX_CONNECTIONS")},
		&cli.IntFlag{Name: "upstream-idle-conns", Value: server.DefaultUpstreamIdleConns, Usage: "the most idle connections to the upstream kept open for reuse", Sources: cli.EnvVars("SLUICE_UPSTREAM_IDLE_CONNS")},
		&cli.BoolFlag{Name: "upstream-http2", Usage: "speak HTTP/2 to the upstream: by ALPN over TLS for https://, prior-knowledge cleartext for http:// (the upstream must speak it)", Sources: cli.EnvVars("SLUICE_UPSTREAM_HTTP2")},
		&cli.BoolFlag{Name: "legacy-headers", Usage: "also send X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset", Sources: cli.EnvVars("SLUICE_LEGACY_HEADERS")},
		&cli.DurationFlag{Name: "shutdown-timeout", Value: server.DefaultShutdownTimeout, Usage: "on SIGTERM or SIGINT, how long to wait for requests in flight", Sources: cli.EnvVars("SLUICE_SHUTDOWN_TIMEOUT")},
		&cli.DurationFlag{Name: "read-timeout", Value: server.DefaultProxyTimeouts.Read, Usage: "the longest the proxy reads one request, body included (a client that sends slowly is cut off)", Sources: cli.EnvVars("SLUICE_PROXY_READ_TIMEOUT")},
		&cli.DurationFlag{Name: "write-timeout", Value: server.DefaultProxyTimeouts.Write, Usage: "the longest the proxy takes to answer one request, the upstream's time included", Sources: cli.EnvVars("SLUICE_PROXY_WRITE_TIMEOUT")},
	}
	flags := slices.Concat(own, listenTLSFlags(), commonFlags(), pprofFlags(), logFlags())
	return &cli.Command{
		Name:  "proxy",
		Usage: "a reverse proxy that applies the configuration's sluice policies in front of an upstream",
		Description: "Every request is limited by the sluice policies of the configuration (per client IP,\n" +
			"user or API key, with tiers, routes and overrides) and, when allowed, forwarded to\n" +
			"--upstream. Responses carry the RateLimit-Policy and RateLimit headers; a denied\n" +
			"request gets 429 with Retry-After and an application/problem+json body, and 503 when\n" +
			"the store is down and the policy fails closed. With an overload block in the\n" +
			"configuration, an adaptive concurrency limit admits each request by its\n" +
			"criticality first and answers a shed one 503 (docs/overload.md). Envoy domains in the\n" +
			"configuration are ignored here. The configuration is reloaded as by serve.\n\n" +
			"With --tls-cert and --tls-key the proxy's listener speaks TLS (HTTP/2 and HTTP/1.1),\n" +
			"and with --tls-client-ca it requires client certificates; --admin stays plain HTTP\n" +
			"(keep it on a private address).",
		Flags:  flags,
		Action: proxy,
	}
}

// proxyListenHook, when set by tests, is told the address the proxy listens on.
var proxyListenHook func(addr net.Addr)

func proxy(ctx context.Context, c *cli.Command) error {
	up, err := url.Parse(c.String("upstream"))
	if err != nil || up.Scheme == "" || up.Host == "" {
		return cli.Exit("--upstream must be an absolute URL such as http://localhost:3000", exitUsage)
	}
	e, err := start(c)
	if err != nil {
		return err
	}
	defer e.close()
	log, w, st := e.log, e.w, e.stack

	p, err := server.NewProxy(server.ProxyOptions{
		Limiter:       st.Limiter(),
		FailureMode:   e.opts.FailureMode,
		Transport:     server.NewUpstreamTransport(int(c.Int("upstream-idle-conns")), c.Bool("upstream-http2")),
		Upstream:      up,
		Watcher:       w,
		LegacyHeaders: c.Bool("legacy-headers"),
		Logger:        log,
		Overrides:     st.Overrides,
		Registry:      e.reg,

		TracerProvider: e.tracerProvider(),
	})
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	var admin *server.Server
	if c.String("admin") != "" {
		admin, err = server.New(server.Options{Limiter: st.Limiter(), Watcher: w, FailureMode: e.opts.FailureMode,
			Ready: st.Ready, Registry: e.reg, Logger: log, ShutdownTimeout: c.Duration("shutdown-timeout")})
		if err != nil {
			return err
		}
	}
	ln, err := listen("listen", c.String("listen"))
	if err != nil {
		return err
	}
	if proxyListenHook != nil {
		proxyListenHook(ln.Addr())
	}
	if ln, err = server.LimitProxyListener(ln, int(c.Int("max-connections")), e.reg); err != nil {
		return err
	}
	if e.tls != nil {
		e.tls.NextProtos = []string{"h2", "http/1.1"}
		ln = tls.NewListener(ln, e.tls)
	}
	hs := server.Timeouts{Read: c.Duration("read-timeout"), Write: c.Duration("write-timeout")}.Or(server.DefaultProxyTimeouts).Server(p)
	hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	adminDone := make(chan error, 1)
	if admin == nil {
		adminDone <- nil
	} else if al, err := listen("admin", c.String("admin")); err != nil {
		ln.Close()
		return err
	} else {
		go func() { adminDone <- admin.Serve(ctx, al, nil) }()
	}

	log.Info("sluice proxy starting", slog.String("version", version()), slog.String("listen", ln.Addr().String()),
		slog.Bool("tls", e.tls != nil), slog.String("upstream", up.Redacted()), slog.String("store", st.Kind()), slog.String("config", describeConfig(w)))
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.Background(), c.Duration("shutdown-timeout"))
		defer scancel()
		log.Info("shutting down: finishing requests in flight")
		err = hs.Shutdown(sctx)
	case err = <-errc:
		cancel()
	}
	return errors.Join(err, <-adminDone)
}
