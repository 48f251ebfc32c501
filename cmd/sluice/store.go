package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/denycache"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/observe"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/server"
)

// storeFlags are the store settings a command line may give; zero values defer to the
// configuration file.
type storeFlags struct {
	redisURL    string
	failureMode config.FailureMode
	deadline    time.Duration
	maxKeys     int64
	sampling    float64
	denyCache   denyCacheFlags
	// fallback, when set, chooses the failure mode per decision (see
	// server.PolicyFallback); serve sets it per request on the context instead.
	fallback func(ctx context.Context, key string, limit sluice.Limit) failover.Fallback
}

// denyCacheFlags configure the denycache.Cache in front of the store; maxBytes 0 leaves
// it out. The set fields say whether the command line or the environment gave the value,
// which then overrides the configuration's store.deny_cache.
type denyCacheFlags struct {
	maxBytes         int64
	maxAge           time.Duration
	bytesSet, ageSet bool
}

// over returns the settings in force: the defaults, then the configuration's deny_cache,
// then the flags that were given.
func (f denyCacheFlags) over(c config.DenyCache) denyCacheFlags {
	out := denyCacheFlags{maxBytes: denycache.DefaultMaxBytes, maxAge: denycache.DefaultMaxAge}
	switch {
	case c.Off:
		out.maxBytes = 0
	case c.MaxBytes > 0:
		out.maxBytes = c.MaxBytes
	}
	if c.MaxAge > 0 {
		out.maxAge = c.MaxAge
	}
	if f.bytesSet {
		out.maxBytes = f.maxBytes
	}
	if f.ageSet {
		out.maxAge = f.maxAge
	}
	return out
}

// store is the limiter chain a command decides with:
//
//	observe (decision log, metrics) -> denycache -> failover (deadline, breaker, mode) -> redisstore
//	observe -> denycache -> memory
//
// The in-memory store cannot fail, so it gets no failover decorator. The deny cache takes
// a denied client's repeats off Redis; in front of either store it marks them (path
// cache), so the decision log samples them instead of writing a line per request of a
// client hammering a key over its limit. It sits above failover: the requests it answers
// are not store calls and must not reach the breaker (as successes they would keep it
// closed, or close it half-open, while Redis is down), and it remembers only the store's
// own denials, never a failure mode's.
type store struct {
	sluice.Limiter
	ready  func(context.Context) error
	close  func() error
	kind   string // "memory" or "redis"
	target string // the Redis URL with its password redacted
}

// openStore builds the chain for cfg and the flags, registering metrics on reg.
// startStore is the set-up serve and proxy share: read the store flags, start the
// configuration watcher, and open the store on a fresh metrics registry. With
// perPolicyFallback the store picks each decision's failure mode from its policy (proxy);
// serve passes the mode per request on the context instead. The caller closes the watcher
// and the store.
func startStore(c *cli.Command, log *slog.Logger, perPolicyFallback bool) (storeFlags, *config.Watcher, *prometheus.Registry, *store, error) {
	sf, err := readStoreFlags(c)
	if err != nil {
		return sf, nil, nil, nil, err
	}
	w, err := config.NewWatcher(c.String("config"), config.WithLogger(log))
	if err != nil {
		return sf, nil, nil, nil, fmt.Errorf("configuration: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if perPolicyFallback {
		sf.fallback = server.PolicyFallback(w.Config, sf.failureMode)
	}
	st, err := openStore(w.Config(), sf, log, reg)
	if err != nil {
		w.Close()
		return sf, nil, nil, nil, err
	}
	return sf, w, reg, st, nil
}

func openStore(cfg *config.Config, f storeFlags, log *slog.Logger, reg prometheus.Registerer) (*store, error) {
	mopts := []observe.MetricsOption{observe.WithMetricsLogger(log)}
	rawURL := f.redisURL
	if rawURL == "" {
		rawURL = cfg.Store.RedisURL
	}
	var (
		inner sluice.Limiter
		st    = &store{kind: "memory", ready: func(context.Context) error { return nil }}
	)
	if rawURL == "" {
		var opts []memory.Option
		if f.maxKeys > 0 {
			opts = append(opts, memory.WithMaxKeys(f.maxKeys))
		}
		m := memory.New(opts...)
		inner, st.close = withDenyCache(m, f.denyCache.over(cfg.Store.DenyCache), reg), m.Close
	} else {
		st.kind, st.target = "redis", redact(rawURL)
		// A Redis that is down when the service starts is a store failure like any other:
		// serve starts, the failure mode answers, /readyz reports it, and the store
		// connects in the background.
		rs, err := redisstore.Open(rawURL, redisstore.WithLogger(log), redisstore.WithConnectRetry())
		if err != nil {
			return nil, fmt.Errorf("redis %s: %s", st.target, scrub(err.Error(), rawURL))
		}
		deadline := f.deadline
		if deadline == 0 {
			deadline = cfg.Store.Deadline
		}
		// The Redis store returns as soon as its context ends (TestFaultsInline holds it to
		// the deadline through a frozen server), so the store is called on the request's
		// own goroutine: no goroutine and no two scheduler hand-offs per decision.
		fopts := []failover.Option{failover.WithDeadline(deadline), failover.WithInlineCalls()}
		if m := server.FailoverMode(f.failureMode); m != failover.Unset {
			fopts = append(fopts, failover.WithDefaultMode(m))
		} else if m := server.FailoverMode(cfg.Store.FailureMode); m != failover.Unset {
			fopts = append(fopts, failover.WithDefaultMode(m))
		}
		if cfg.Store.LocalShare > 0 {
			fopts = append(fopts, failover.WithLocalShare(cfg.Store.LocalShare))
		}
		if f.fallback != nil {
			fopts = append(fopts, failover.WithFallbackFunc(f.fallback))
		}
		fl := failover.New(rs, fopts...)
		inner = withDenyCache(fl, f.denyCache.over(cfg.Store.DenyCache), reg)
		st.close = func() error { return errors.Join(fl.Close(), rs.Close()) }
		st.ready = rs.Ping
		mopts = append(mopts, observe.WithEvictedKeys(rs.EvictedKeys, 15*time.Second))
	}
	metrics, err := observe.NewMetrics(reg, mopts...)
	if err != nil {
		st.close()
		return nil, err
	}
	oopts := []observe.Option{observe.WithLogger(log), observe.WithMetrics(metrics)}
	if f.sampling >= 0 {
		oopts = append(oopts, observe.WithSampling(f.sampling))
	}
	st.Limiter = observe.New(inner, oopts...)
	return st, nil
}

// withDenyCache puts a denycache.Cache configured by f in front of store, unless f turns
// it off, and exports its size.
func withDenyCache(store sluice.Limiter, f denyCacheFlags, reg prometheus.Registerer) sluice.Limiter {
	if f.maxBytes <= 0 {
		return store
	}
	c := denycache.New(store, denycache.WithMaxBytes(f.maxBytes), denycache.WithMaxAge(f.maxAge))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sluice", Name: "deny_cache_entries",
		Help: "Denials of the store held by the deny cache, which answers repeats of them in-process (decisions with path=\"cache\").",
	}, func() float64 { return float64(c.Len()) }))
	return c
}

// redact returns a URL with its password replaced, for logs and errors.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// scrub removes a URL's password from msg, wherever the message quotes it.
func scrub(msg, raw string) string {
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
