package observe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Metrics are the Prometheus metrics of one or more observed limiters. Create them once
// with NewMetrics and pass them to every New that should record into them.
//
// Series (with the default namespace "sluice"):
//
//	sluice_decisions_total{policy,result,path}
//		decisions; result is allowed, denied or error; path is store, open, closed, local
//		or cache (a denycache.Cache answered)
//	sluice_fallback_decisions_total{policy,mode,result}
//		decisions made by a failure mode (open, closed, local) instead of the store
//	sluice_store_latency_seconds{policy}
//		time waiting for the store, for decisions that called it (including those cut at
//		the deadline; not those a denycache.Cache answered)
//	sluice_store_errors_total{kind}
//		store failures by sluice.ErrorKind (timeout, refused, oom, busy, breaker_open,
//		misconfigured, ...)
//	sluice_breaker_state{state}
//		1 for the circuit breaker's current state (closed, half_open, open), 0 for the
//		others, as of the last decision through a failover.Limiter (give each breaker its
//		own Metrics, e.g. with WithNamespace)
//	sluice_redis_evicted_keys_total
//		growth of Redis's evicted_keys since the first poll (see WithEvictedKeys); any
//		growth means some quotas were reset
//
// The overload limit's series are OverloadMetrics'.
type Metrics struct {
	decisions    *prometheus.CounterVec
	fallbacks    *prometheus.CounterVec
	storeLatency *prometheus.HistogramVec
	storeErrors  *prometheus.CounterVec
	breaker      *prometheus.GaugeVec
	evicted      prometheus.Counter
	evictErrors  prometheus.Counter
	metricsConfig

	// policies caches each policy's per-decision series, so that recording a decision
	// hashes and validates no labels; last is the policy of the last decision recorded,
	// found without the map.
	policies sync.Map // policy string -> *policyMetrics
	last     atomic.Pointer[policyMetrics]
	// breakerMu serializes updates of the breaker_state series; breakerNow is the state
	// they show.
	breakerMu  sync.Mutex
	breakerNow atomic.Int32

	evictMu   sync.Mutex
	evictLast int64 // the last evicted_keys read, -1 before the first

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	polls  sync.WaitGroup
}

// MetricsOption configures Metrics.
type MetricsOption func(*metricsConfig)

type metricsConfig struct {
	namespace  string
	buckets    []float64
	evictFn    func(context.Context) (int64, error)
	evictEvery time.Duration
	logger     *slog.Logger
}

// WithNamespace sets the metric name prefix (default "sluice").
func WithNamespace(ns string) MetricsOption { return func(c *metricsConfig) { c.namespace = ns } }

// WithLatencyBuckets sets the store latency histogram's buckets, in seconds (default 50µs
// to about 100ms, doubling).
func WithLatencyBuckets(b []float64) MetricsOption {
	return func(c *metricsConfig) { c.buckets = b }
}

// WithEvictedKeys polls f every interval (default 15s when interval ≤ 0) for Redis's
// evicted_keys counter (redisstore's Store.EvictedKeys has this signature) and adds its
// growth to sluice_redis_evicted_keys_total. The first poll only sets the baseline; a
// value below the previous one (a restarted server, CONFIG RESETSTAT) counts in full.
// Growth is also logged as a warning, since each evicted key is a quota reset. Each poll
// gets a context bounded by the interval. Close stops the polling.
func WithEvictedKeys(f func(context.Context) (int64, error), interval time.Duration) MetricsOption {
	return func(c *metricsConfig) { c.evictFn, c.evictEvery = f, interval }
}

// WithMetricsLogger sets the logger for eviction warnings (default slog.Default()).
func WithMetricsLogger(l *slog.Logger) MetricsOption {
	return func(c *metricsConfig) { c.logger = l }
}

// NewMetrics creates the metrics and registers them on reg. It fails if reg refuses
// them (for example because they are already registered).
func NewMetrics(reg prometheus.Registerer, opts ...MetricsOption) (*Metrics, error) {
	c := metricsConfig{
		namespace: "sluice",
		buckets:   prometheus.ExponentialBuckets(50e-6, 2, 12), // 50µs .. 102.4ms
	}
	for _, o := range opts {
		o(&c)
	}
	c.logger = cmp.Or(c.logger, slog.Default())
	if c.evictEvery <= 0 {
		c.evictEvery = 15 * time.Second
	}
	if reg == nil {
		return nil, errors.New("observe: nil prometheus.Registerer")
	}
	counterVec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: c.namespace, Name: name, Help: help}, labels)
	}
	gaugeVec := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: c.namespace, Name: name, Help: help}, labels)
	}
	m := &Metrics{
		decisions: counterVec("decisions_total", "Rate limit decisions by policy, result (allowed, denied, error) and path (store, open, closed, local, cache).", "policy", "result", "path"),
		fallbacks: counterVec("fallback_decisions_total", "Decisions made by a failure mode (open, closed, local) because the store could not decide.", "policy", "mode", "result"),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: c.namespace, Name: "store_latency_seconds",
			Help:    "Time spent waiting for the store per decision that called it, including calls cut at the deadline.",
			Buckets: c.buckets,
		}, []string{"policy"}),
		storeErrors:   counterVec("store_errors_total", "Store failures by kind (timeout, refused, reset, busy, oom, loading, readonly, clusterdown, redirect, noscript, breaker_open, overload, other).", "kind"),
		breaker:       gaugeVec("breaker_state", "Circuit breaker state: 1 for the current state (closed, half_open, open), 0 for the others.", "state"),
		evicted:       prometheus.NewCounter(prometheus.CounterOpts{Namespace: c.namespace, Name: "redis_evicted_keys_total", Help: "Growth of Redis's evicted_keys since the first poll; each evicted key is a reset quota."}),
		evictErrors:   prometheus.NewCounter(prometheus.CounterOpts{Namespace: c.namespace, Name: "redis_evicted_keys_poll_errors_total", Help: "Failed polls of Redis's evicted_keys."}),
		metricsConfig: c,
		evictLast:     -1,
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	cs := []prometheus.Collector{m.decisions, m.fallbacks, m.storeLatency, m.storeErrors, m.breaker}
	if m.evictFn != nil {
		cs = append(cs, m.evicted, m.evictErrors)
	}
	for i, col := range cs {
		if err := reg.Register(col); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("observe: register metrics: %w", err)
		}
	}
	m.setBreaker(store.BreakerClosed)
	if m.evictFn != nil {
		m.polls.Go(m.pollLoop)
	}
	return m, nil
}

// Close stops polling evicted_keys. The metrics stay registered.
func (m *Metrics) Close() error {
	m.cancel()
	m.polls.Wait()
	return nil
}

func (m *Metrics) pollLoop() {
	t := time.NewTicker(m.evictEvery)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(m.ctx, m.evictEvery)
		if err := m.PollEvictedKeys(ctx); err != nil && m.ctx.Err() == nil {
			m.logger.Debug("sluice: could not read Redis evicted_keys", slog.Any("error", err))
		}
		cancel()
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// PollEvictedKeys reads evicted_keys now and records its growth, as the background poll
// does. It returns the poll's error; without WithEvictedKeys it does nothing.
func (m *Metrics) PollEvictedKeys(ctx context.Context) error {
	if m.evictFn == nil {
		return nil
	}
	n, err := m.evictFn(ctx)
	if err != nil {
		m.evictErrors.Inc()
		return err
	}
	m.evictMu.Lock()
	defer m.evictMu.Unlock()
	growth := n - m.evictLast
	if n < m.evictLast {
		growth = n // the counter restarted
	}
	if m.evictLast < 0 {
		growth = 0 // the baseline
	}
	m.evictLast = n
	if growth > 0 {
		m.evicted.Add(float64(growth))
		m.logger.Warn("sluice: Redis evicted keys; some rate limit quotas were reset (set maxmemory-policy noeviction and give Redis more memory)",
			slog.Int64("evicted", growth), slog.Int64("evicted_keys", n))
	}
	return nil
}

// setBreaker makes the breaker_state series show s. The series change only when s
// differs from what they show.
func (m *Metrics) setBreaker(s sluice.BreakerState) {
	if m.breakerNow.Load() == int32(s) {
		return
	}
	m.breakerMu.Lock()
	defer m.breakerMu.Unlock()
	for _, st := range breakerStates {
		v := 0.0
		if st == s {
			v = 1
		}
		m.breaker.WithLabelValues(st.String()).Set(v)
	}
	m.breakerNow.Store(int32(s))
}

// breakerStates are the states sluice_breaker_state has a series for.
var breakerStates = [...]sluice.BreakerState{store.BreakerClosed, store.BreakerHalfOpen, store.BreakerOpen}

// The result label values of sluice_decisions_total, by index.
const (
	resultAllowed = iota
	resultDenied
	resultError
	numResults
)

var resultNames = [numResults]string{"allowed", "denied", "error"}

// numPaths is the number of sluice.Path values (store, open, closed, local, cache).
const numPaths = int(sluice.PathCache) + 1

// failedOver reports whether a failure mode decided: the store failed.
func failedOver(p sluice.Path) bool {
	return p == sluice.PathOpen || p == sluice.PathClosed || p == sluice.PathLocal
}

// policyMetrics are one policy's per-decision series, each made on first use (so that
// no series appears before it has counted something).
type policyMetrics struct {
	name      string
	decisions [numResults][numPaths]atomic.Pointer[prometheus.Counter]
	latency   prometheus.Observer
}

// policy returns the series of the named policy, made on its first decision. A stale
// last (a concurrent decision of another policy stored its own) costs a map lookup,
// never a wrong series: each name has one *policyMetrics, the map's.
func (m *Metrics) policy(name string) *policyMetrics {
	if p := m.last.Load(); p != nil && p.name == name {
		return p
	}
	v, ok := m.policies.Load(name)
	if !ok {
		v, _ = m.policies.LoadOrStore(name, &policyMetrics{name: name, latency: m.storeLatency.WithLabelValues(name)})
	}
	p := v.(*policyMetrics)
	m.last.Store(p)
	return p
}

// decision returns the sluice_decisions_total series of one policy, result and path.
func (m *Metrics) decision(p *policyMetrics, policy string, result int, path sluice.Path) prometheus.Counter {
	if int(path) >= numPaths {
		return m.decisions.WithLabelValues(policy, resultNames[result], path.String())
	}
	slot := &p.decisions[result][path]
	if c := slot.Load(); c != nil {
		return *c
	}
	c := m.decisions.WithLabelValues(policy, resultNames[result], path.String())
	slot.CompareAndSwap(nil, &c) // a concurrent first use made the same series
	return c
}

// record adds one decision to the metrics.
func (m *Metrics) record(policy string, d *sluice.Decision, err error, kind sluice.ErrorKind, breaker sluice.BreakerState, storeLatency time.Duration, called bool) {
	result := resultAllowed
	switch {
	case err != nil:
		result = resultError
	case !d.Allowed:
		result = resultDenied
	}
	p := m.policy(policy)
	m.decision(p, policy, result, d.Path).Inc()
	if failedOver(d.Path) {
		m.fallbacks.WithLabelValues(policy, d.Path.String(), resultNames[result]).Inc()
	}
	if called {
		p.latency.Observe(storeLatency.Seconds())
	}
	if store.IsFailure(kind) {
		m.storeErrors.WithLabelValues(string(kind)).Inc()
	}
	if breaker != store.BreakerNone {
		m.setBreaker(breaker)
	}
}
