package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/denycache"
	"github.com/sluicehq/sluice/internal/headroom"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/stack"
)

// commonFlags are the configuration and store flags of serve and proxy.
func commonFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "config", Usage: "a configuration `PATH`: a YAML file, or a directory of them (sluice policy files and envoyproxy/ratelimit domain files, one domain per file); watched and reloaded on change and on SIGHUP. Empty: the built-in example configuration", Sources: cli.EnvVars("SLUICE_CONFIG")},
		&cli.StringFlag{Name: "redis", Usage: "keep limits in Redis at this `URL` (redis://, rediss://; see the redisstore docs for Cluster and Sentinel), overriding the configuration's store.redis_url. Empty: the configuration's, else in memory", Sources: cli.EnvVars("SLUICE_REDIS_URL")},
		&cli.StringFlag{Name: "failure-mode", Usage: "what to do when Redis cannot decide: open (allow), closed (deny: HTTP 503, Envoy OVER_LIMIT) or local (decide in-process with a share of each limit). Overrides the configuration's store.failure_mode; a policy that names its own mode keeps it", Sources: cli.EnvVars("SLUICE_FAILURE_MODE")},
		&cli.DurationFlag{Name: "deadline", Usage: "the longest a decision waits for Redis before the failure mode decides (0: the configuration's store.deadline, else 5ms)", Sources: cli.EnvVars("SLUICE_DEADLINE")},
		&cli.DurationFlag{Name: "redis-min-ttl", Usage: "Redis store: keep every key at least this long (redisstore.WithMinTTL; 0: a key lives exactly until its state is empty). A client that returns within it finds its key and overwrites it, instead of Redis expiring the key and creating it again: less of Redis's periodic expiry work, for more memory (see the redisstore docs)", Sources: cli.EnvVars("SLUICE_REDIS_MIN_TTL")},
		&cli.Int64Flag{Name: "max-keys", Usage: fmt.Sprintf("in-memory store, and the local fallback (--failure-mode local) beside Redis: the most (key, limit) states kept; over it the states closest to empty are evicted, counted in sluice_memory_evictions_total (0: stack.DefaultMaxKeys, %d; -1: unbounded; idle keys are always swept). bench/README.md has the bytes per key", stack.DefaultMaxKeys), Sources: cli.EnvVars("SLUICE_MAX_KEYS")},
		&cli.Int64Flag{Name: "deny-cache-bytes", Value: denycache.DefaultMaxBytes, Usage: "remember the store's denials in up to this many bytes and answer repeats of them in-process while they certainly hold, so a client over its limit costs Redis nothing and its repeats are sampled in the decision log (see the denycache package; 0 disables). Overrides the configuration's store.deny_cache", Sources: cli.EnvVars("SLUICE_DENY_CACHE_BYTES")},
		&cli.DurationFlag{Name: "deny-cache-max-age", Value: denycache.DefaultMaxAge, Usage: "the longest a remembered denial answers without asking the store: how long a reset made through another replica can go unseen", Sources: cli.EnvVars("SLUICE_DENY_CACHE_MAX_AGE")},
		&cli.Int64Flag{Name: "gc-headroom-bytes", Value: headroom.Default, Usage: "let the heap grow by at least this many bytes between garbage collections (Go's own pacing, GOGC=100, once the live heap is larger): fewer collections for a process that keeps little state, as on Redis. 0: Go's pacing. Not applied when GOGC is set in the environment (see the internal/headroom package)", Sources: cli.EnvVars("SLUICE_GC_HEADROOM_BYTES")},
		&cli.IntFlag{Name: "max-reservations", Usage: fmt.Sprintf("in-memory store and local fallback: the most settlement records kept (one per allowed decision of a policy with settle, until its settle TTL); a decision allowed over it keeps none, so its estimate stands, counted in sluice_memory_reservations_dropped_total (0: stack.DefaultMaxReservations, %d; -1: unbounded)", stack.DefaultMaxReservations), Sources: cli.EnvVars("SLUICE_MAX_RESERVATIONS")},
		&cli.FloatFlag{Name: "log-sampling", Value: -1, Usage: "the share of allowed decisions, and of denials the deny cache repeated, written to the decision log, in [0, 1] (the store's denials and failures are always logged; -1: the observe package's default of 1%)", Sources: cli.EnvVars("SLUICE_LOG_SAMPLING")},
	}
}

func serveCommand() *cli.Command {
	listeners := []cli.Flag{
		&cli.StringFlag{Name: "http", Value: ":8080", Usage: "listen `ADDR`ess of the HTTP API (/v1/check, /v1/peek, /v1/reset, /v1/config, /healthz, /readyz, /metrics); empty disables it", Sources: cli.EnvVars("SLUICE_HTTP_ADDR")},
		&cli.StringFlag{Name: "grpc", Value: ":8081", Usage: "listen `ADDR`ess of Envoy's rate limit service (envoy.service.ratelimit.v3) and gRPC health; empty disables it", Sources: cli.EnvVars("SLUICE_GRPC_ADDR")},
	}
	service := []cli.Flag{
		&cli.BoolFlag{Name: "shadow-mode", Usage: "answer every request as allowed while still deciding, counting and reporting limits (the reference implementation's SHADOW_MODE, also read)", Sources: cli.EnvVars("SLUICE_SHADOW_MODE", "SHADOW_MODE")},
		&cli.BoolFlag{Name: "limit-response-headers", Usage: "add the reference implementation's three headers to Envoy rate limit answers (response_headers_to_add): the limit, the remaining quota and the seconds to the reset of the descriptor closest to its limit, as its LIMIT_RESPONSE_HEADERS_ENABLED (also read). Off: no such headers, as there", Sources: cli.EnvVars("SLUICE_LIMIT_RESPONSE_HEADERS", "LIMIT_RESPONSE_HEADERS_ENABLED")},
		&cli.StringFlag{Name: "limit-limit-header", Value: server.DefaultLimitHeader, Usage: "the `NAME` of --limit-response-headers' limit header (the reference's LIMIT_LIMIT_HEADER, also read)", Sources: cli.EnvVars("SLUICE_LIMIT_LIMIT_HEADER", "LIMIT_LIMIT_HEADER")},
		&cli.StringFlag{Name: "limit-remaining-header", Value: server.DefaultRemainingHeader, Usage: "the `NAME` of --limit-response-headers' remaining header (the reference's LIMIT_REMAINING_HEADER, also read)", Sources: cli.EnvVars("SLUICE_LIMIT_REMAINING_HEADER", "LIMIT_REMAINING_HEADER")},
		&cli.StringFlag{Name: "limit-reset-header", Value: server.DefaultResetHeader, Usage: "the `NAME` of --limit-response-headers' reset header (the reference's LIMIT_RESET_HEADER, also read)", Sources: cli.EnvVars("SLUICE_LIMIT_RESET_HEADER", "LIMIT_RESET_HEADER")},
		&cli.BoolFlag{Name: "rls-ietf-headers", Usage: "add RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers), one item per limit, and Retry-After on OVER_LIMIT to Envoy rate limit answers (response_headers_to_add), as the HTTP API sends them. Off: none, as the reference implementation", Sources: cli.EnvVars("SLUICE_RLS_IETF_HEADERS")},
		&cli.StringFlag{Name: "admin-token-file", Usage: "read the admin token (for /v1/reset and /v1/config) from this `FILE` on every admin request, instead of the configuration's admin block (default: $SLUICE_ADMIN_TOKEN). Without a token, admin endpoints refuse every request", Sources: cli.EnvVars("SLUICE_ADMIN_TOKEN_FILE")},
		&cli.DurationFlag{Name: "shutdown-timeout", Value: server.DefaultShutdownTimeout, Usage: "on SIGTERM or SIGINT, how long to wait for requests in flight", Sources: cli.EnvVars("SLUICE_SHUTDOWN_TIMEOUT")},
		&cli.DurationFlag{Name: "http-read-timeout", Value: server.DefaultHTTPTimeouts.Read, Usage: "the longest the HTTP API reads one request, body included", Sources: cli.EnvVars("SLUICE_HTTP_READ_TIMEOUT")},
		&cli.DurationFlag{Name: "http-write-timeout", Value: server.DefaultHTTPTimeouts.Write, Usage: "the longest the HTTP API takes to write one answer, from the end of its request's headers", Sources: cli.EnvVars("SLUICE_HTTP_WRITE_TIMEOUT")},
		&cli.IntFlag{Name: "max-descriptors", Usage: fmt.Sprintf("refuse a rate limit request (gRPC InvalidArgument, HTTP 400) of more descriptors than this (0: the configuration's store.request_limits, else %d)", config.DefaultMaxDescriptors), Sources: cli.EnvVars("SLUICE_MAX_DESCRIPTORS")},
		&cli.IntFlag{Name: "max-entries", Usage: fmt.Sprintf("refuse a rate limit request with a descriptor of more entries than this (0: the configuration's, else %d)", config.DefaultMaxEntries), Sources: cli.EnvVars("SLUICE_MAX_ENTRIES")},
		&cli.IntFlag{Name: "max-request-bytes", Usage: fmt.Sprintf("refuse a rate limit request whose descriptors' keys and values exceed this many bytes, and a JSON body of more than this plus 64 KiB (0: the configuration's, else %d)", config.DefaultMaxBytes), Sources: cli.EnvVars("SLUICE_MAX_REQUEST_BYTES")},
		&cli.IntFlag{Name: "max-connections", Usage: fmt.Sprintf("the most connections open at once on each listener (HTTP, gRPC); one more is closed as soon as it is accepted, counted in sluice_server_connections_refused_total (0: %d; -1: unbounded). bench/README.md has the bytes per connection", server.DefaultMaxConnections), Sources: cli.EnvVars("SLUICE_MAX_CONNECTIONS")},
		&cli.IntFlag{Name: "rlqs-max-streams", Value: server.DefaultQuotaMaxStreams, Usage: "the most RLQS streams (connected proxies) open at once; one more is refused with RESOURCE_EXHAUSTED, counted in sluice_rlqs_streams_refused_total. Memory grows with streams times --rlqs-max-buckets-per-stream (bench/README.md has the bytes per bucket)", Sources: cli.EnvVars("SLUICE_RLQS_MAX_STREAMS")},
		&cli.IntFlag{Name: "rlqs-max-buckets-per-stream", Value: server.DefaultQuotaMaxBucketsPerStream, Usage: "the most distinct RLQS buckets one stream reports on; a report on one more is answered with abandon_action (sluice_rlqs_bucket_actions_total{action=\"abandon_too_many_buckets\"})", Sources: cli.EnvVars("SLUICE_RLQS_MAX_BUCKETS_PER_STREAM")},
	}
	flags := slices.Concat(listeners, listenTLSFlags(), commonFlags(), service,
		pprofFlags(), logFlags())
	return &cli.Command{
		Name:  "serve",
		Usage: "run the rate limit service: HTTP JSON API and Envoy's rate limit service (gRPC)",
		Description: "Serves the HTTP JSON API (default :8080) and Envoy's rate limit service over gRPC\n" +
			"(default :8081). Limits are kept in memory unless --redis or the configuration names\n" +
			"Redis. Without --config, a built-in example configuration is used: a \"demo\" policy of\n" +
			"10 requests/s per client IP, an \"api\" policy per API key with tiers, a \"users\"\n" +
			"policy of 100 requests/min per user ID, and an Envoy domain \"demo\".\n\n" +
			"The configuration is reloaded when its files change and on SIGHUP; an invalid one is\n" +
			"rejected, logged and counted (sluice_config_reload_rejected_total), and the previous\n" +
			"one stays in force. SIGTERM or SIGINT stops accepting connections, finishes the\n" +
			"requests in flight and closes the store.\n\n" +
			"With --tls-cert and --tls-key both listeners speak TLS (HTTPS and gRPC over TLS),\n" +
			"and with --tls-client-ca they require client certificates (mutual TLS), health and\n" +
			"metrics endpoints included.\n\n" +
			"Try it:\n" +
			"  curl -i -d '{\"policy\":\"demo\",\"key\":\"203.0.113.7\"}' localhost:8080/v1/check",
		Flags:  flags,
		Action: serve,
	}
}

// listenHook, when set by tests, is told the addresses serve listens on.
var listenHook func(httpAddr, grpcAddr string)

func serve(ctx context.Context, c *cli.Command) error {
	e, err := start(c)
	if err != nil {
		return err
	}
	defer e.close()
	log, w, st := e.log, e.w, e.stack
	cfg := w.Config()

	opts := server.Options{
		Limiter:     st.Limiter(),
		Watcher:     w,
		FailureMode: e.opts.FailureMode,
		ShadowMode:  c.Bool("shadow-mode"),
		RLSHeaders: server.RLSHeaders{
			Reference: c.Bool("limit-response-headers"),
			Limit:     c.String("limit-limit-header"),
			Remaining: c.String("limit-remaining-header"),
			Reset:     c.String("limit-reset-header"),
			IETF:      c.Bool("rls-ietf-headers"),
		},
		Ready:           st.Ready,
		Registry:        e.reg,
		Logger:          log,
		ShutdownTimeout: c.Duration("shutdown-timeout"),
		TLS:             e.tls,
		RequestLimits: config.RequestLimits{
			MaxDescriptors: int(c.Int("max-descriptors")),
			MaxEntries:     int(c.Int("max-entries")),
			MaxBytes:       int(c.Int("max-request-bytes")),
		},
		MaxConnections: int(c.Int("max-connections")),
		HTTPTimeouts:   server.Timeouts{Read: c.Duration("http-read-timeout"), Write: c.Duration("http-write-timeout")},
		Quota: server.QuotaOptions{Store: st.Quota,
			MaxStreams: int(c.Int("rlqs-max-streams")), MaxBucketsPerStream: int(c.Int("rlqs-max-buckets-per-stream"))},
		Overrides: st.Overrides,
		Now:       e.opts.Clock,

		TracerProvider: e.tracerProvider(),
	}
	if opts.RequestLimits.MaxDescriptors < 0 || opts.RequestLimits.MaxEntries < 0 || opts.RequestLimits.MaxBytes < 0 {
		return cli.Exit("--max-descriptors, --max-entries and --max-request-bytes must not be negative", exitUsage)
	}
	if opts.Quota.MaxStreams < 1 || opts.Quota.MaxBucketsPerStream < 1 {
		return cli.Exit("--rlqs-max-streams and --rlqs-max-buckets-per-stream must be at least 1", exitUsage)
	}
	if f := c.String("admin-token-file"); f != "" {
		opts.AdminToken = config.Admin{TokenFile: f}.Token
	}
	srv, err := server.New(opts)
	if err != nil {
		return err
	}

	var hl, gl net.Listener
	if a := c.String("http"); a != "" {
		if hl, err = listen("http", a); err != nil {
			return err
		}
	}
	if a := c.String("grpc"); a != "" {
		if gl, err = listen("grpc", a); err != nil {
			if hl != nil {
				hl.Close()
			}
			return err
		}
	}
	if hl == nil && gl == nil {
		return cli.Exit("--http and --grpc are both empty: nothing to serve", exitUsage)
	}
	if listenHook != nil {
		listenHook(addrString(hl), addrString(gl))
	}
	attrs := []any{
		slog.String("version", version()),
		slog.String("store", st.Kind()),
		slog.String("config", describeConfig(w)),
		slog.String("digest", cfg.Digest),
		slog.String("http", addrString(hl)),
		slog.String("grpc", addrString(gl)),
		slog.Int("policies", len(cfg.Policies)),
		slog.Int("domains", len(cfg.Domains)),
	}
	if st.Target() != "" {
		attrs = append(attrs, slog.String("redis", st.Target()))
	}
	if e.opts.FailureMode != sluice.FailInherit {
		attrs = append(attrs, slog.String("failure_mode", e.opts.FailureMode.String()))
	}
	log.Info("sluice starting", attrs...)
	if cfg.Overload != nil {
		// The overload limit guards the requests a proxy forwards; serve forwards none.
		log.Warn("config: the overload block applies to sluice proxy only; serve ignores it")
	}
	return srv.Serve(ctx, hl, gl)
}

// listen listens on the address addr that --flag chose; an error names the flag, so that
// an address in use says which setting to change.
func listen(flag, addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s %s: %w", flag, addr, err)
	}
	return l, nil
}

// addrString is l's address, or "" for no listener.
func addrString(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

func describeConfig(w *config.Watcher) string { return cmp.Or(w.Path(), "built-in example") }

// reloadOnSIGHUP reloads w's configuration on every SIGHUP until the returned function is
// called.
func reloadOnSIGHUP(w *config.Watcher, log *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			log.Info("SIGHUP: reloading the configuration")
			w.Reload() // the Watcher logs the outcome
		}
	}()
	return func() { signal.Stop(hup); close(hup) }
}
