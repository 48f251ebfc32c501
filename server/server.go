package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/span"
	"github.com/sluicehq/sluice/override"
	"github.com/sluicehq/sluice/store"
)

// DefaultShutdownTimeout is how long Serve waits for requests in flight when its context
// ends, if Options.ShutdownTimeout is 0.
const DefaultShutdownTimeout = 15 * time.Second

// DefaultReadyTimeout bounds one readiness probe of the store.
const DefaultReadyTimeout = time.Second

// RateLimitServiceName is the gRPC service this package implements, as the gRPC health
// service knows it.
const RateLimitServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Options configures a Server. Only Limiter is required.
type Options struct {
	// Limiter decides the limits of one request in one call, all or nothing (package
	// stack builds the production stack).
	Limiter sluice.Limiter
	// Watcher, when set, supplies the configuration in force (hot reload) and its reload
	// metrics; otherwise Config is used, else config.Default().
	Watcher *config.Watcher
	Config  *config.Config
	// FailureMode is the service's --failure-mode, resolved as [config.Config.Failure]
	// says. [sluice.FailInherit] when not given.
	FailureMode sluice.FailureMode
	// RLSHeaders selects the headers Envoy's rate limit answers add to the client's
	// response. The zero value adds none, as the reference implementation does.
	RLSHeaders RLSHeaders
	// ShadowHeaders puts shadow limits in the RateLimit headers (the JSON API's, and
	// Envoy's with RLSHeaders.IETF); by default they stay out, since nothing enforces
	// them. The JSON answer lists them either way, marked shadow.
	ShadowHeaders bool
	// ShadowMode answers every request as allowed (the reference's SHADOW_MODE); limits
	// are still decided, counted, logged and reported.
	ShadowMode bool
	// AdminToken returns the token of the admin endpoints. Nil reads config.Admin.Token
	// of the configuration in force, $SLUICE_ADMIN_TOKEN without an admin block. An
	// error or an empty token refuses every admin request.
	AdminToken func() (string, error)
	// Ready reports whether the store is reachable, for /readyz and the gRPC health
	// service (stack.Stack.Ready). Nil: always.
	Ready func(context.Context) error
	// Registry receives the metrics /metrics serves. Nil: a new registry with the Go and
	// process collectors.
	Registry *prometheus.Registry
	// Logger receives denied requests, store errors, reloads and shutdown. Nil discards.
	Logger *slog.Logger
	// ShutdownTimeout bounds Serve's wait for requests in flight
	// (DefaultShutdownTimeout when 0).
	ShutdownTimeout time.Duration
	// Now is the clock for windows the store does not decide (requests_per_unit 0).
	// Nil: time.Now.
	Now func() time.Time
	// RequestLimits caps one rate limit request; zero fields take the configuration's
	// store.request_limits, else config.RequestLimits' defaults.
	RequestLimits config.RequestLimits
	// HTTPTimeouts are the HTTP listener's; zero fields take DefaultHTTPTimeouts.
	HTTPTimeouts Timeouts
	// Quota configures the Rate Limit Quota Service (RLQS) served beside RLS.
	Quota QuotaOptions
	// Overrides keeps the limits set through /v1/overrides (stack.Stack's Overrides,
	// shared by every replica on Redis). Nil keeps them in the process.
	Overrides override.Store
	// OverrideRefresh is how often other replicas' changes are looked for
	// (DefaultOverrideRefresh when 0).
	OverrideRefresh time.Duration
	// TLS, when set, makes Serve speak TLS on both listeners (HTTPS with HTTP/2 and
	// HTTP/1.1, gRPC over TLS), for every endpoint: with ClientAuth, health probes need
	// a client certificate too. Serve sets NextProtos.
	TLS *tls.Config
	// MaxConnections bounds the connections open at once on each of Serve's listeners;
	// one more is closed when accepted, counted in
	// sluice_server_connections_refused_total. 0: DefaultMaxConnections; negative: none.
	MaxConnections int
	// TracerProvider, when set, traces every decision request (docs/service.md,
	// "Traces"). Nil traces nothing, at no cost.
	TracerProvider trace.TracerProvider
}

// The reference implementation's default header names (its LIMIT_LIMIT_HEADER,
// LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER).
const (
	DefaultLimitHeader     = "RateLimit-Limit"
	DefaultRemainingHeader = "RateLimit-Remaining"
	DefaultResetHeader     = "RateLimit-Reset"
)

// RLSHeaders selects the headers of Envoy's rate limit answers (Options.RLSHeaders).
// Both sets may be on; the reference's come first.
type RLSHeaders struct {
	// Reference adds the reference implementation's three headers (its
	// LIMIT_RESPONSE_HEADERS_ENABLED). They describe one descriptor: the last one over its
	// limit, else the first with the least limit_remaining below 4294967295; their values
	// are its requests_per_unit, limit_remaining and duration_until_reset in seconds.
	Reference bool
	// Limit, Remaining and Reset name those headers; empty takes the Default names.
	Limit, Remaining, Reset string
	// IETF adds RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-11),
	// one item per limit the store decided, and Retry-After to OVER_LIMIT answers.
	IETF bool
}

// resolve returns h with its empty names defaulted, or an error naming a field name
// that is not a valid HTTP field name.
func (h RLSHeaders) resolve() (RLSHeaders, error) {
	h.Limit = cmp.Or(h.Limit, DefaultLimitHeader)
	h.Remaining = cmp.Or(h.Remaining, DefaultRemainingHeader)
	h.Reset = cmp.Or(h.Reset, DefaultResetHeader)
	for _, name := range []string{h.Limit, h.Remaining, h.Reset} {
		if !httpguts.ValidHeaderFieldName(name) {
			return h, fmt.Errorf("server: RLSHeaders: %q is not a valid HTTP header name", name)
		}
	}
	return h, nil
}

// Server is the rate limit service: the HTTP JSON API (Handler), Envoy's rate limit
// service over gRPC (RegisterGRPC), health, metrics and admin endpoints. It is safe for
// concurrent use.
type Server struct {
	opts        Options // defaulted by New
	customToken bool    // Options.AdminToken was given
	log         *slog.Logger
	now         func() time.Time
	metrics     *metrics
	health      *health.Server
	draining    atomic.Bool
	hashers     *hashers
	rlqs        *rlqs
	conns       *connLimits
	tracer      span.Tracer
	envoy       atomic.Pointer[envoyCache]
	envoyMu     sync.Mutex // held while making envoy
	ovr         *overrideCache
}

// requestLimits returns the request caps in force with cfg.
func (s *Server) requestLimits(cfg *config.Config) config.RequestLimits {
	return s.opts.RequestLimits.Or(cfg.Store.RequestLimits)
}

// maxMessage bounds the encoded size of a ShouldRateLimit request within lim: its keys
// and values, and per entry and per descriptor the protobuf framing (tags, lengths, an
// override), with room for the domain.
func maxMessage(lim config.RequestLimits) int {
	return lim.MaxBytes + lim.MaxDescriptors*(lim.MaxEntries*16+64) + 64<<10
}

// checkSize refuses descriptors over lim before they are matched.
func checkSize(lim config.RequestLimits, descs []config.Descriptor) error {
	if n := len(descs); n > lim.MaxDescriptors {
		return fmt.Errorf("%d descriptors, more than the %d allowed (request_limits.max_descriptors)", n, lim.MaxDescriptors)
	}
	total := 0
	for i, d := range descs {
		if c := len(d.Entries); c > lim.MaxEntries {
			return fmt.Errorf("descriptor %d has %d entries, more than the %d allowed (request_limits.max_entries)", i, c, lim.MaxEntries)
		}
		for _, e := range d.Entries {
			total += len(e.Key) + len(e.Value)
		}
		if total > lim.MaxBytes {
			return fmt.Errorf("descriptors of more than the %d bytes allowed (request_limits.max_bytes)", lim.MaxBytes)
		}
	}
	return nil
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Limiter == nil {
		return nil, errors.New("server: Options.Limiter is required")
	}
	var err error
	if opts.RLSHeaders, err = opts.RLSHeaders.resolve(); err != nil {
		return nil, err
	}
	s := &Server{opts: opts, customToken: opts.AdminToken != nil, health: health.NewServer(),
		tracer: span.NewTracer(opts.TracerProvider)}
	o := &s.opts
	o.Config = cmp.Or(o.Config, config.Default())
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	o.HTTPTimeouts = o.HTTPTimeouts.Or(DefaultHTTPTimeouts)
	o.ShutdownTimeout = orPositive(o.ShutdownTimeout, DefaultShutdownTimeout)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Ready == nil {
		o.Ready = func(context.Context) error { return nil }
	}
	if o.AdminToken == nil {
		o.AdminToken = func() (string, error) {
			a := s.config().Admin
			if a == (config.Admin{}) {
				a.TokenEnv = "SLUICE_ADMIN_TOKEN"
			}
			return a.Token()
		}
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	s.log, s.now = o.Logger, o.Now
	m, err := newMetrics(o.Registry, o.Watcher)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.hashers = newHashers(s.log)
	if s.rlqs, err = newRLQS(s, opts.Quota, o.Registry); err != nil {
		return nil, err
	}
	s.conns, err = connLimitsOf(o.Registry, "server", "Options.MaxConnections, serve's --max-connections",
		cmpMax(opts.MaxConnections, DefaultMaxConnections))
	if err != nil {
		return nil, err
	}
	s.ovr = newOverrideCache(opts.Overrides, opts.OverrideRefresh, s.now, s.log,
		func() { m.overrideChanges.WithLabelValues("expire").Inc() })
	return s, nil
}

// config returns the configuration in force.
func (s *Server) config() *config.Config { return configOf(s.opts.Watcher, s.opts.Config) }

// configOf returns the configuration in force: w's, else static.
func configOf(w *config.Watcher, static *config.Config) *config.Config {
	if w != nil {
		return w.Config()
	}
	return static
}

// Registry returns the registry /metrics serves, for other collectors (the observe
// decorator's) to register with.
func (s *Server) Registry() *prometheus.Registry { return s.opts.Registry }

// RegisterGRPC registers Envoy's rate limit service, the Rate Limit Quota Service and
// the gRPC health service on g.
func (s *Server) RegisterGRPC(g *grpc.Server) {
	rlsv3.RegisterRateLimitServiceServer(g, &rls{s: s})
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, s.rlqs)
	healthpb.RegisterHealthServer(g, s.health)
}

// grpcWindow is the gRPC server's HTTP/2 flow-control window, per stream and per
// connection.
const grpcWindow = 1 << 20

// NewGRPCServer returns a gRPC server with the rate limit and health services registered
// and keepalive settings suited to Envoy's long-lived connections.
func (s *Server) NewGRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	opts = append([]grpc.ServerOption{
		// Calls run on warm worker goroutines; a call finding none idle starts one, so the
		// pool is large. See bench/README.md.
		grpc.NumStreamWorkers(uint32(64 * runtime.GOMAXPROCS(0))),
		// Fixed windows: no bandwidth-estimation PING per round trip, fewer
		// WINDOW_UPDATEs. See bench/README.md.
		grpc.InitialWindowSize(grpcWindow),
		grpc.InitialConnWindowSize(grpcWindow),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Minute, Timeout: 20 * time.Second}),
		// Larger than any request within the request limits at start: refused undecoded.
		grpc.MaxRecvMsgSize(maxMessage(s.requestLimits(s.config()))),
		grpc.ForceServerCodecV2(newRLSCodec()),
	}, opts...)
	g := grpc.NewServer(opts...)
	s.RegisterGRPC(g)
	return g
}

// Serve serves the HTTP API on httpLn and gRPC on grpcLn (either may be nil) until ctx
// ends or a listener fails, then shuts down: readiness and gRPC health turn to not
// serving, the listeners stop accepting, and requests in flight get ShutdownTimeout to
// finish before their connections are closed. It returns nil after a shutdown caused by
// ctx, else the listener's error. It does not close the Limiter.
func (s *Server) Serve(ctx context.Context, httpLn, grpcLn net.Listener) error {
	// The health status is set before the listeners serve, so that no health check
	// finds the service unknown (at most DefaultReadyTimeout when the store is down).
	stopProbe := s.probeReady(ctx)
	rctx, stopRefresh := context.WithCancel(ctx)
	defer stopRefresh()
	go s.ovr.loop(rctx)
	errc := make(chan error, 2)
	serve := func(name string, ln net.Listener, run func(net.Listener) error, stopped error) {
		go func() {
			if err := run(ln); err != nil && !errors.Is(err, stopped) {
				errc <- fmt.Errorf("server: %s: %w", name, err)
			}
		}()
		s.log.Info("serving "+name, slog.String("addr", ln.Addr().String()), slog.Bool("tls", s.opts.TLS != nil))
	}
	var hs *http.Server
	if httpLn != nil {
		httpLn = s.conns.listener(httpLn, "http")
		hs = s.opts.HTTPTimeouts.Server(s.Handler())
		hs.ErrorLog = slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
		if s.opts.TLS != nil {
			c := s.opts.TLS.Clone()
			c.NextProtos = []string{"h2", "http/1.1"}
			httpLn = tls.NewListener(httpLn, c)
		}
		serve("HTTP", httpLn, hs.Serve, http.ErrServerClosed)
	}
	var gs *grpc.Server
	if grpcLn != nil {
		grpcLn = s.conns.listener(grpcLn, "grpc")
		var opts []grpc.ServerOption
		if s.opts.TLS != nil {
			// credentials.NewTLS clones the configuration and offers h2 by ALPN.
			opts = append(opts, grpc.Creds(credentials.NewTLS(s.opts.TLS)))
		}
		gs = s.NewGRPCServer(opts...)
		serve("gRPC", grpcLn, gs.Serve, grpc.ErrServerStopped)
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.draining.Store(true)
	stopProbe()
	s.health.Shutdown()
	s.log.Info("shutting down: finishing requests in flight", slog.String("timeout", s.opts.ShutdownTimeout.String()))

	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	if hs != nil {
		wg.Go(func() {
			if err := hs.Shutdown(sctx); err != nil {
				s.log.Warn("HTTP requests still in flight at the shutdown deadline were cut", slog.String("error", err.Error()))
				hs.Close()
			}
		})
	}
	if gs != nil {
		wg.Go(func() {
			done := make(chan struct{})
			go func() { gs.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-sctx.Done():
				s.log.Warn("gRPC calls still in flight at the shutdown deadline were cut")
				gs.Stop()
				<-done
			}
		})
	}
	wg.Wait()
	s.log.Info("shut down")
	return err
}

// probeReady keeps the gRPC health status in step with the store's reachability until
// the returned function is called.
func (s *Server) probeReady(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	set := func() {
		st := healthpb.HealthCheckResponse_SERVING
		if err := s.checkReady(ctx); err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		s.health.SetServingStatus("", st)
		s.health.SetServingStatus(RateLimitServiceName, st)
		s.health.SetServingStatus(RateLimitQuotaServiceName, st)
	}
	set()
	go func() {
		defer close(done)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				set()
			}
		}
	}()
	return func() { cancel(); <-done }
}

// checkReady reports why the service is not ready: shutting down, the store refuses its
// settings (store.KindMisconfigured, named so: retrying cannot fix it), or the store is
// not reachable.
func (s *Server) checkReady(ctx context.Context) error {
	if s.draining.Load() {
		return errors.New("shutting down")
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultReadyTimeout)
	defer cancel()
	if err := s.opts.Ready(ctx); err != nil {
		if sluice.KindOf(err) == store.KindMisconfigured {
			return fmt.Errorf("store misconfigured: %w", err)
		}
		return fmt.Errorf("store not reachable: %w", err)
	}
	return nil
}
