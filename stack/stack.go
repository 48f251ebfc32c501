// Package stack builds the production decision stack from a configuration, in one fixed
// order, so that what `sluice serve`, `sluice proxy`, the examples and the end-to-end
// tests run is one and the same thing:
//
//	observe (decision log, metrics)
//	  -> failover (deadline, circuit breaker, failure modes, local fallback)
//	    -> denycache (repeats of the store's denials, answered in-process)
//	      -> store: memory | redisstore
//
// observe is on top, so that it sees every decision as the caller gets it. The deny cache
// is below failover, so that its answers are bounded by the same deadline and, reported
// as not having asked the store, never count for the breaker. On memory, which cannot
// fail, failover is left out. The local fallback of failover is a memory store the stack
// makes and owns, with the memory store's bounds (Options.MaxKeys,
// Options.MaxReservations).
package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/denycache"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/observe"
	"github.com/sluicehq/sluice/override"
	"github.com/sluicehq/sluice/quota"
	"github.com/sluicehq/sluice/redisstore"
)

// DefaultMaxKeys bounds the keys of the memory store, and of the local fallback beside
// Redis, when Options.MaxKeys is 0 (memory.WithMaxKeys). With the other defaults it fits
// the shipped chart's memory limit.
const DefaultMaxKeys = 1 << 19

// DefaultMaxReservations bounds the settlement records the memory store (and the local
// fallback) keeps when Options.MaxReservations is 0 (memory.WithMaxReservations): one per
// allowed decision of a policy that settles, until its settle TTL.
const DefaultMaxReservations = 1 << 16

// Options are the settings a command line may give on top of the configuration's store
// block. Zero values defer to the configuration, then to each package's default.
type Options struct {
	// RedisURL keeps limits in Redis, overriding cfg.Store.RedisURL. Both empty: memory.
	RedisURL string
	// FailureMode is the service's --failure-mode: the failure mode of limits whose policy
	// names none, before cfg.Store.FailureMode (config.Config.Failure resolves the order).
	FailureMode sluice.FailureMode
	// Deadline overrides cfg.Store.Deadline (failover.DefaultDeadline when both are 0).
	Deadline time.Duration
	// MaxKeys bounds the keys of the memory store, or of the local fallback on Redis: 0
	// takes DefaultMaxKeys, a negative value leaves the store unbounded (idle keys are
	// still swept).
	MaxKeys int64
	// MaxReservations bounds the settlement records of the memory store, or of the local
	// fallback: 0 takes DefaultMaxReservations, negative leaves them unbounded (each is
	// still dropped after its settle TTL).
	MaxReservations int
	// QuotaMaxClients bounds the (bucket, client) entries of the quota.Memory beside the
	// memory store (quota.WithMaxClients); 0: no bound of its own.
	QuotaMaxClients int
	// DenyCache configures the deny cache; see DenyCache.
	DenyCache DenyCache
	// Sampling is observe's log sampling; negative takes observe.DefaultSampling.
	Sampling float64
	// FailureSummary is observe's failure summary interval: 0 takes
	// observe.DefaultFailureSummary, negative logs every failure on its own line.
	FailureSummary time.Duration
	// Logger receives the decision log and the stack's own records. Nil discards.
	Logger *slog.Logger
	// Registry receives the metrics. Nil: a registry of the stack's own.
	Registry prometheus.Registerer
	// Clock, when set, is the clock of the store and the deny cache instead of the
	// monotonic clock (memory) or the server's TIME (Redis): for tests and simulation.
	Clock func() time.Time
	// Breaker configures failover's circuit breaker; zero fields take its defaults.
	Breaker failover.Breaker
	// ConnectRetry opens the Redis store at once and keeps connecting in the background
	// (what a service wants when it may start before its Redis); otherwise Open fails
	// when Redis cannot be reached.
	ConnectRetry bool
	// RedisOptions are added to the Redis store's options.
	RedisOptions []redisstore.Option
}

// DenyCache configures the deny cache. Off turns it off; otherwise MaxBytes and MaxAge,
// when positive, override the configuration's store.deny_cache, which overrides the
// package's defaults.
type DenyCache struct {
	Off      bool
	MaxBytes int64
	MaxAge   time.Duration
}

// settings returns the deny cache in force: the defaults, then the configuration's
// deny_cache, then o. maxBytes 0 means off.
func (o DenyCache) settings(c config.DenyCache) (maxBytes int64, maxAge time.Duration) {
	maxBytes = cmp.Or(max(o.MaxBytes, 0), max(c.MaxBytes, 0), denycache.DefaultMaxBytes)
	if o.Off || c.Off && o.MaxBytes <= 0 {
		maxBytes = 0
	}
	return maxBytes, cmp.Or(max(o.MaxAge, 0), max(c.MaxAge, 0), denycache.DefaultMaxAge)
}

// ServiceConcurrency is the script calls the stack's Redis store keeps in flight at once
// per server (redisstore.WithConcurrency), unless Options.RedisOptions says otherwise.
const ServiceConcurrency = 1

// QuotaPrefix begins the Redis keys of the quota assignments.
const QuotaPrefix = "sluice:rlqs:"

// Stack is a built decision stack. Limiter is its top; Close closes every layer the
// stack made, top down.
type Stack struct {
	limiter sluice.Limiter
	kind    string
	target  string
	ready   func(context.Context) error
	closers []func() error
	// Failover is the failover layer (nil on memory), for its breaker state.
	Failover *failover.Limiter
	// Store is the bottom of the stack: a *memory.Store or a *redisstore.Store.
	Store sluice.Limiter
	// Quota keeps the Rate Limit Quota Service's assignments in the same store: a
	// quota.Memory beside memory, a quota.Redis on the same Redis.
	Quota quota.Store
	// Overrides keeps the limits set at run time beside the store: in the process on
	// memory, in Redis (visible to every replica) on Redis.
	Overrides override.Store
}

// Limiter returns the top of the stack, which every front end decides with.
func (s *Stack) Limiter() sluice.Limiter { return s.limiter }

// Kind returns "memory" or "redis".
func (s *Stack) Kind() string { return s.kind }

// Target returns the Redis URL with its password redacted, or "" on memory.
func (s *Stack) Target() string { return s.target }

// Ready reports whether the store is reachable (always, on memory).
func (s *Stack) Ready(ctx context.Context) error { return s.ready(ctx) }

// Close closes the layers the stack made.
func (s *Stack) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// Open builds the stack for cfg and o (see the package doc for the order).
func Open(cfg *config.Config, o Options) (*Stack, error) {
	if cfg == nil {
		cfg = config.Default()
	}
	log := cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	reg := cmp.Or[prometheus.Registerer](o.Registry, prometheus.NewRegistry())
	st := &Stack{kind: "memory", ready: func(context.Context) error { return nil }}
	rawURL := cmp.Or(o.RedisURL, cfg.Store.RedisURL)
	mopts := []observe.MetricsOption{observe.WithMetricsLogger(log)}
	var lim sluice.Limiter
	if rawURL == "" {
		opts := o.memoryBounds()
		if o.Clock != nil {
			opts = append(opts, memory.WithClock(o.Clock))
		}
		m := memory.New(opts...)
		st.closers = append(st.closers, m.Close)
		registerMemory(reg, "memory", m)
		st.Store, st.Overrides = m, override.NewMemory()
		st.Quota = quota.NewMemory(o.Clock, quota.WithMaxClients(o.QuotaMaxClients))
		lim = st.withDenyCache(m, cfg, o, reg)
	} else {
		st.kind, st.target = "redis", config.RedactURL(rawURL)
		// One script call in flight, so that each carries more decisions; o.RedisOptions,
		// added after, may override it.
		ropts := []redisstore.Option{redisstore.WithLogger(log), redisstore.WithConcurrency(ServiceConcurrency)}
		if o.ConnectRetry {
			ropts = append(ropts, redisstore.WithConnectRetry())
		}
		if o.Clock != nil {
			ropts = append(ropts, redisstore.WithClock(o.Clock))
		}
		ropts = append(ropts, o.RedisOptions...)
		rs, err := redisstore.Open(rawURL, ropts...)
		if err != nil {
			return nil, fmt.Errorf("redis %s: %s", st.target, Scrub(err.Error(), rawURL))
		}
		st.closers = append(st.closers, rs.Close)
		st.Store, st.ready = rs, rs.Ping
		registerMisconfigured(reg, rs)
		st.Quota = quota.NewRedis(rs.Client, QuotaPrefix, o.Clock)
		st.Overrides = override.NewRedis(rs.Client, rs.Prefix())
		local := memory.New(o.memoryBounds()...)
		st.closers = append(st.closers, local.Close)
		registerMemory(reg, "local", local)

		// The Redis store returns as soon as its context ends: it is called inline.
		fl := failover.New(st.withDenyCache(rs, cfg, o, reg),
			failover.WithDeadline(cmp.Or(o.Deadline, cfg.Store.Deadline)),
			failover.WithInlineCalls(),
			failover.WithBreaker(o.Breaker),
			failover.WithDefault(cfg.Failure(nil, o.FailureMode)),
			failover.WithLocalLimiter(local),
			failover.WithStateChange(func(from, to sluice.BreakerState) {
				log.Warn("circuit breaker", slog.String("from", from.String()), slog.String("to", to.String()))
			}),
		)
		st.closers = append(st.closers, fl.Close)
		st.Failover = fl
		lim = fl
		mopts = append(mopts, observe.WithEvictedKeys(rs.EvictedKeys, 15*time.Second))
	}
	metrics, err := observe.NewMetrics(reg, mopts...)
	if err != nil {
		st.Close()
		return nil, err
	}
	st.closers = append(st.closers, metrics.Close)
	oopts := []observe.Option{observe.WithLogger(log), observe.WithMetrics(metrics)}
	if o.Sampling >= 0 {
		oopts = append(oopts, observe.WithSampling(o.Sampling))
	}
	if o.FailureSummary != 0 {
		oopts = append(oopts, observe.WithFailureSummary(o.FailureSummary))
	}
	ol := observe.New(lim, oopts...)
	st.closers = append(st.closers, func() error { ol.Flush(); return nil }) // first at Close
	st.limiter = ol
	return st, nil
}

// memoryBounds are the bounds of an in-memory store (the store, or the local fallback) o
// sets, defaults resolved.
func (o Options) memoryBounds() []memory.Option {
	var opts []memory.Option
	if n := cmp.Or(o.MaxKeys, DefaultMaxKeys); n > 0 {
		opts = append(opts, memory.WithMaxKeys(n))
	}
	if n := cmp.Or(o.MaxReservations, DefaultMaxReservations); n > 0 {
		opts = append(opts, memory.WithMaxReservations(n))
	}
	return opts
}

// registerMemory exports a memory store's size and evictions, labelled store="memory" for
// the service's store and store="local" for failover's local fallback.
func registerMemory(reg prometheus.Registerer, role string, m *memory.Store) {
	labels := prometheus.Labels{"store": role}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "memory_keys", ConstLabels: labels,
		Help: "(key, limit) states held by an in-process store.",
	}, func() float64 { return float64(m.Len()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "sluice", Name: "memory_evictions_total", ConstLabels: labels,
		Help: "States an in-process store evicted, closest to empty first, to stay within its key bound; each is a quota forgotten early.",
	}, func() float64 { return float64(m.Evictions()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "memory_reservations", ConstLabels: labels,
		Help: "Settlement records held by an in-process store, each until its settle TTL.",
	}, func() float64 { return float64(m.Reservations()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "sluice", Name: "memory_reservations_dropped_total", ConstLabels: labels,
		Help: "Allowed decisions of a settling policy that kept no settlement record, the store holding its bound of them: their estimate stands.",
	}, func() float64 { return float64(m.ReservationsDropped()) }))
}

// registerMisconfigured exports, per cause, whether Redis refuses the store's settings
// (redisstore.Store.Misconfigured): an error retrying cannot fix.
func registerMisconfigured(reg prometheus.Registerer, rs *redisstore.Store) {
	for _, cause := range redisstore.ConfigCauses {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "sluice", Name: "store_misconfigured", ConstLabels: prometheus.Labels{"cause": cause},
			Help: "1 while Redis refuses the store's settings for this cause (auth, database, tls, cluster, sentinel, command) at the latest connection attempt or readiness check: retrying cannot fix it, the operator must; else 0.",
		}, func() float64 {
			if ce := rs.Misconfigured(); ce != nil && ce.Cause == cause {
				return 1
			}
			return 0
		}))
	}
}

// withDenyCache puts a deny cache configured by cfg and o in front of store, unless they
// turn it off, and exports its size.
func (s *Stack) withDenyCache(store sluice.Limiter, cfg *config.Config, o Options, reg prometheus.Registerer) sluice.Limiter {
	maxBytes, maxAge := o.DenyCache.settings(cfg.Store.DenyCache)
	if maxBytes <= 0 {
		return store
	}
	dopts := []denycache.Option{denycache.WithMaxBytes(maxBytes), denycache.WithMaxAge(maxAge)}
	if o.Clock != nil {
		dopts = append(dopts, denycache.WithClock(o.Clock))
	}
	c := denycache.New(store, dopts...)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "deny_cache_entries",
		Help: "Denials of the store held by the deny cache, which answers repeats of them in-process (decisions with path=\"cache\").",
	}, func() float64 { return float64(c.Len()) }))
	return c
}

// Scrub removes a URL's password from msg, wherever the message quotes it.
func Scrub(msg, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return strings.ReplaceAll(msg, raw, "(redis URL)")
	}
	msg = strings.ReplaceAll(msg, raw, u.Redacted())
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return msg
}
