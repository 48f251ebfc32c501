// Package observe makes every rate limit decision explainable: a decorator around any
// sluice.Limiter that writes one structured log/slog event per decision and records
// Prometheus metrics (see Metrics).
//
//	metrics, err := observe.NewMetrics(prometheus.DefaultRegisterer,
//		observe.WithEvictedKeys(redis.EvictedKeys, 15*time.Second))
//	...
//	lim := observe.New(failover.New(redis), observe.WithLogger(logger), observe.WithMetrics(metrics))
//	ctx = observe.WithPolicy(ctx, "per-api-key")
//	d, err := lim.AllowN(ctx, key, limit, 1)
//
// # The decision log
//
// Each event has the message "rate limit decision" and these attributes:
//
//	policy         the policy name (WithBatchPolicies for a request of a batch, else
//	               WithPolicy on the context, else WithDefaultPolicy)
//	key            the key hashed (HashKey, or WithKeyHash); the raw key never appears,
//	               and an error message that quotes it has it replaced by the hash
//	algorithm      gcra, token_bucket, ..., and limit, period, burst of the applied Limit
//	cost           the units asked for (n)
//	allowed        the decision
//	remaining      Decision.Remaining
//	used           what the limiter saw: the units counted against the limit after the
//	               decision (Limit.MaxCost − Remaining), that is the window's count for
//	               the window algorithms and the bucket's level (burst minus tokens) for
//	               the bucket ones. A denial spends nothing, so for a denial it is exactly
//	               the state the store held when it refused.
//	retry_after, reset_after
//	path           store, open, closed, local or cache (who decided; cache: a
//	               denycache.Cache repeated the store's earlier denial)
//	mode, share    the failure mode and local share, when a failure mode decided
//	breaker        closed, half_open or open, when a failover.Limiter is inside
//	store_latency  time waiting for the store (absent when it was not called)
//	latency        the whole call
//	error, error_kind
//	               the error returned, or the store failure that a failure mode absorbed,
//	               and its failover.Kind
//
// Allowed decisions that the store made are sampled (WithSampling, default 1%), and so are
// denials a deny cache answered (path cache): each repeats a denial of the store's, which
// was logged, and a client hammering a key over its limit would otherwise write a line per
// request (4 MB/s at 11k requests/s, measured). The store's denials, errors and decisions
// made by a failure mode are always logged. Allowed and denied decisions are logged at
// Info, the others at Warn.
//
// To explain a disputed 429, search the log for the key's hash (HashKey of the key the
// front end built, e.g. keys.Key.String()) and read used, remaining and retry_after of
// its denials.
//
// # Where the details come from
//
// When the inner limiter is (or wraps) a failover.Limiter, observe passes a
// failover.Report in the context and logs what it says: store latency, the store's error
// even when a failure mode absorbed it, the resolved mode and the breaker state.
// Otherwise the store latency is the inner call's duration and the error is the one
// returned.
package observe

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
)

// DefaultPolicy is the policy name of decisions whose context names none, unless
// WithDefaultPolicy says otherwise.
const DefaultPolicy = "default"

// DefaultSampling is the share of allowed store decisions (and of denials a deny cache
// answered) logged unless WithSampling says otherwise.
const DefaultSampling = 0.01

// Limiter is a sluice.Limiter (and sluice.MultiLimiter) that logs and measures every
// decision of an inner limiter. Create it with New; it is safe for concurrent use.
type Limiter struct {
	inner    sluice.Limiter
	logger   *slog.Logger
	metrics  *Metrics
	sampling float64
	hash     func(string) string
	policy   string
	n        atomic.Uint64 // sampled decisions seen (see WithSampling)
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithLogger sets the logger (default slog.Default()); nil logs nothing.
func WithLogger(l *slog.Logger) Option { return func(o *Limiter) { o.logger = l } }

// WithMetrics records into m (default: no metrics).
func WithMetrics(m *Metrics) Option { return func(o *Limiter) { o.metrics = m } }

// WithSampling sets the share of allowed store decisions, and of denials a deny cache
// answered, that are logged, in [0, 1] (default DefaultSampling). Sampling is
// deterministic: with share 1/k, every k-th such decision is logged. The store's denials,
// errors and fallback decisions are always logged.
func WithSampling(share float64) Option {
	return func(o *Limiter) {
		switch {
		case share <= 0:
			o.sampling = 0
		case share >= 1:
			o.sampling = 1
		default:
			o.sampling = share
		}
	}
}

// WithKeyHash sets how keys are written to the log (default HashKey). Use a keyed hash,
// such as keys.Hasher's Sum, when keys are guessable and must not be recoverable from
// the log. It must never return the key itself.
func WithKeyHash(f func(key string) string) Option { return func(o *Limiter) { o.hash = f } }

// WithDefaultPolicy sets the policy name of decisions whose context names none (default
// DefaultPolicy).
func WithDefaultPolicy(name string) Option { return func(o *Limiter) { o.policy = name } }

// New returns a Limiter that observes inner.
func New(inner sluice.Limiter, opts ...Option) *Limiter {
	l := &Limiter{
		inner:    inner,
		logger:   slog.Default(),
		sampling: DefaultSampling,
		hash:     HashKey,
		policy:   DefaultPolicy,
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// HashKey is the default key hash: "sha256:" and the first 16 hex digits (64 bits) of the
// key's SHA-256. It is stable across processes, so an operator can compute it for a key
// and find its decisions.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

type policyKey struct{}

// WithPolicy returns a context naming the policy of the decisions made with it, for logs
// and metrics.
func WithPolicy(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, policyKey{}, name)
}

// PolicyFrom returns the policy name carried by ctx, if any.
func PolicyFrom(ctx context.Context) (string, bool) {
	p, ok := ctx.Value(policyKey{}).(string)
	return p, ok
}

type batchPoliciesKey struct{}

// WithBatchPolicies returns a context naming the policy of each request of an AllowMulti
// batch made with it, in request order (a front end deciding several policies at once).
// Requests beyond the names, and empty names, take the policy of WithPolicy.
func WithBatchPolicies(ctx context.Context, names ...string) context.Context {
	return context.WithValue(ctx, batchPoliciesKey{}, names)
}

func (l *Limiter) policyOf(ctx context.Context) string {
	if p, ok := PolicyFrom(ctx); ok && p != "" {
		return p
	}
	return l.policy
}

// batchPolicyOf returns the policy of request i of a batch.
func (l *Limiter) batchPolicyOf(ctx context.Context, i int) string {
	if i < 0 {
		// Not in a batch: no need to look for batch names (a walk up the whole context
		// chain when there are none).
		return l.policyOf(ctx)
	}
	if names, _ := ctx.Value(batchPoliciesKey{}).([]string); i < len(names) && names[i] != "" {
		return names[i]
	}
	return l.policyOf(ctx)
}

// AllowN implements sluice.Limiter.
func (l *Limiter) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Decision, error) {
	rctx, rep := failover.NewReport(ctx)
	start := time.Now()
	d, err := l.inner.AllowN(rctx, key, limit, n)
	elapsed := time.Since(start)
	l.observe(ctx, rep, elapsed, sluice.Request{Key: key, Limit: limit, N: n}, d, err, -1, 0)
	return d, err
}

// AllowMulti implements sluice.MultiLimiter when the inner limiter does; otherwise it
// returns an error wrapping sluice.ErrNotAtomic. Each request of the batch is logged and
// counted as a decision of its own, with batch and batch_size attributes, under the
// policy WithBatchPolicies names for it.
func (l *Limiter) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	ml, ok := l.inner.(sluice.MultiLimiter)
	if !ok {
		return nil, &notAtomicError{inner: l.inner}
	}
	rctx, rep := failover.NewReport(ctx)
	start := time.Now()
	ds, err := ml.AllowMulti(rctx, reqs)
	elapsed := time.Since(start)
	for i, r := range reqs {
		var d sluice.Decision
		if i < len(ds) {
			d = ds[i]
		} else {
			d.Limit = r.Limit
		}
		l.observe(ctx, rep, elapsed, r, d, err, i, len(reqs))
	}
	return ds, err
}

type notAtomicError struct{ inner sluice.Limiter }

func (e *notAtomicError) Error() string {
	return "observe: " + sluice.ErrNotAtomic.Error() + ": the inner limiter has no AllowMulti"
}
func (e *notAtomicError) Unwrap() error { return sluice.ErrNotAtomic }

// Reset implements sluice.Limiter. Resets are logged at Info.
func (l *Limiter) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	err := l.inner.Reset(ctx, key, limit)
	if l.logger != nil {
		attrs := []slog.Attr{
			slog.String("policy", l.policyOf(ctx)),
			slog.String("key", l.hash(key)),
			slog.String("algorithm", limit.Algorithm.String()),
			slog.Int64("limit", limit.Rate),
			slog.Duration("period", limit.Period),
		}
		if err != nil {
			attrs = append(attrs, slog.String("error", l.redact(err.Error(), key)))
		}
		l.logger.LogAttrs(ctx, slog.LevelInfo, "rate limit reset", attrs...)
	}
	return err
}

// observe logs and records one decision. batch is the request's index in an AllowMulti
// batch of size, or -1.
func (l *Limiter) observe(ctx context.Context, rep *failover.Report, elapsed time.Duration, r sluice.Request, d sluice.Decision, err error, batch, size int) {
	policy := l.batchPolicyOf(ctx, batch)
	kind := rep.Kind
	storeLatency, called := rep.StoreLatency, rep.Called
	var breaker *failover.BreakerState
	cause := rep.Cause
	if rep.Filled() {
		breaker = &rep.Breaker
	} else {
		// No failover.Limiter inside: the inner call is the store call.
		storeLatency, called = elapsed, true
		kind = failover.Classify(err)
		if sluice.IsBadInput(err) {
			called = false
		}
	}
	if d.Path == sluice.PathCache && err == nil {
		called = false // answered by a denycache.Cache: no store was waited for
	}
	if cause == nil {
		cause = err
	}
	if err != nil && kind == "" {
		kind = failover.Classify(err)
	}
	if l.metrics != nil {
		l.metrics.record(policy, d, err, kind, breaker, storeLatency, called)
	}
	if l.logger == nil {
		return
	}

	level := slog.LevelInfo
	if err != nil || failedOver(d.Path) || cause != nil {
		level = slog.LevelWarn
	} else if (d.Allowed || d.Path == sluice.PathCache) && !l.sample() {
		return
	}
	if !l.logger.Enabled(ctx, level) {
		return
	}
	lim := d.Limit
	if lim.Rate == 0 {
		lim = r.Limit
	}
	attrs := make([]slog.Attr, 0, 24)
	attrs = append(attrs,
		slog.String("policy", policy),
		slog.String("key", l.hash(r.Key)),
		slog.String("algorithm", lim.Algorithm.String()),
		slog.Int64("limit", lim.Rate),
		slog.Duration("period", lim.Period),
	)
	if lim.Burst > 0 {
		attrs = append(attrs, slog.Int64("burst", lim.Burst))
	}
	attrs = append(attrs,
		slog.Int64("cost", r.N),
		slog.Bool("allowed", d.Allowed),
		slog.Int64("remaining", d.Remaining),
	)
	if err == nil && d.Path != sluice.PathOpen && d.Path != sluice.PathClosed {
		attrs = append(attrs, slog.Int64("used", max(lim.MaxCost()-d.Remaining, 0)))
	}
	attrs = append(attrs,
		slog.Duration("retry_after", d.RetryAfter),
		slog.Duration("reset_after", d.ResetAfter),
		slog.String("path", d.Path.String()),
	)
	if failedOver(d.Path) || rep.Fallback.Mode != failover.Unset {
		attrs = append(attrs, slog.String("mode", rep.Fallback.Mode.String()))
		if rep.Fallback.Mode == failover.FailLocal {
			attrs = append(attrs, slog.Float64("share", rep.Fallback.Share))
		}
	}
	if breaker != nil {
		attrs = append(attrs, slog.String("breaker", breaker.String()))
	}
	if called {
		attrs = append(attrs, slog.Duration("store_latency", storeLatency))
	}
	attrs = append(attrs, slog.Duration("latency", elapsed))
	if batch >= 0 {
		attrs = append(attrs, slog.Int("batch", batch), slog.Int("batch_size", size))
	}
	if cause != nil {
		attrs = append(attrs, slog.String("error", l.redact(cause.Error(), r.Key)), slog.String("error_kind", string(kind)))
	}
	l.logger.LogAttrs(ctx, level, "rate limit decision", attrs...)
}

// sample reports whether this sampled decision (see WithSampling) is logged.
func (l *Limiter) sample() bool {
	switch {
	case l.sampling >= 1:
		return true
	case l.sampling <= 0:
		return false
	}
	i := l.n.Add(1) - 1
	return uint64(float64(i+1)*l.sampling) > uint64(float64(i)*l.sampling)
}

// minRedactLen is the shortest key redact replaces in messages: shorter ones would
// garble the message and are no secret.
const minRedactLen = 4

// redact replaces key, as is and as %q would escape it, by its hash in msg.
func (l *Limiter) redact(msg, key string) string {
	if len(key) < minRedactLen {
		return msg
	}
	h := l.hash(key)
	msg = strings.ReplaceAll(msg, key, h)
	if q := strconv.Quote(key); len(q) > 2 {
		msg = strings.ReplaceAll(msg, q[1:len(q)-1], h)
	}
	return msg
}
