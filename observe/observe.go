// Package observe makes every rate limit decision explainable: a decorator around any
// sluice.Limiter that writes one structured log/slog event per decision and records
// Prometheus metrics ([Metrics] lists the series).
//
//	metrics, err := observe.NewMetrics(prometheus.DefaultRegisterer,
//		observe.WithEvictedKeys(redis.EvictedKeys, 15*time.Second))
//	...
//	lim := observe.New(failover.New(redis), observe.WithLogger(logger), observe.WithMetrics(metrics))
//	rep, err := lim.Decide(ctx, []sluice.Request{{Key: key, Limit: limit, N: 1, Policy: "per-api-key"}}, ds)
//
// Each decision is one "rate limit decision" event; the key appears only hashed. Allowed
// decisions are sampled ([WithSampling]) and failures summarised per interval
// ([WithFailureSummary]). docs/decision-log.md is the log's contract. Everything but the
// request and the decisions comes from the sluice.Report the inner limiter returns.
package observe

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logattr"
	"github.com/sluicehq/sluice/store"
)

// DefaultPolicy is the policy name of decisions whose request names none, unless
// WithDefaultPolicy says otherwise.
const DefaultPolicy = "default"

// DefaultSampling is the share of allowed store decisions (and of denials a deny cache
// answered) logged unless WithSampling says otherwise.
const DefaultSampling = 0.01

// Limiter is a sluice.Limiter that logs and measures every decision of an inner limiter.
// Create it with New; it is safe for concurrent use.
type Limiter struct {
	inner    sluice.Limiter
	logger   *slog.Logger
	metrics  *Metrics
	sampling float64
	hash     func(string) string
	policy   string
	n        atomic.Uint64 // sampled decisions seen (see WithSampling)
	fails    failures      // the failure summary (see WithFailureSummary)
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
	return func(o *Limiter) { o.sampling = min(max(share, 0), 1) }
}

// WithKeyHash sets how keys are written to the log (default HashKey). Use a keyed hash,
// such as keys.Hasher's Sum, when keys are guessable and must not be recoverable from
// the log. It must never return the key itself.
func WithKeyHash(f func(key string) string) Option { return func(o *Limiter) { o.hash = f } }

// WithDefaultPolicy sets the policy name of decisions whose request names none (default
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
		fails:    failures{every: DefaultFailureSummary, groups: map[failKey]*failCount{}},
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

// Decide implements sluice.Limiter. Each request of a call is logged and counted as a
// decision of its own, under its Policy; a call of several requests adds batch and
// batch_size attributes.
func (l *Limiter) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	clear(ds[:min(len(ds), len(reqs))]) // an inner limiter that fails may write none: log no stale decision
	start := time.Now()
	rep, err := l.inner.Decide(ctx, reqs, ds)
	elapsed := time.Since(start)
	for i := range reqs {
		var d sluice.Decision
		if i < len(ds) {
			d = ds[i]
		}
		if d.Limit == (sluice.Limit{}) {
			d.Limit = reqs[i].Limit
		}
		l.observe(ctx, &rep, start, elapsed, &reqs[i], &d, err, i, len(reqs))
	}
	return rep, err
}

// AllowN is Decide of one request.
func (l *Limiter) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Decision, error) {
	return sluice.AllowN(ctx, l, key, limit, n)
}

// Reserve implements sluice.Limiter. Reservations are logged at Debug, their errors at
// Warn.
func (l *Limiter) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	res, err := l.inner.Reserve(ctx, key, limit, n)
	l.logOp(ctx, opLevel(err), "rate limit reservation", key, err, func() []slog.Attr {
		return append(limitAttrs(nil, limit),
			slog.Int64("cost", n),
			slog.Bool("ok", res.OK),
			logattr.Millis("delay_ms", res.Delay),
		)
	})
	return res, err
}

// limitAttrs appends to attrs the attributes that name limit in the logs.
func limitAttrs(attrs []slog.Attr, limit sluice.Limit) []slog.Attr {
	return append(attrs,
		slog.String("algorithm", limit.Algorithm.String()),
		slog.Int64("limit", limit.Rate),
		logattr.Millis("period_ms", limit.Period),
	)
}

// Release implements sluice.Limiter. Releases are logged at Debug, failed ones at Warn.
func (l *Limiter) Release(ctx context.Context, key string, limit sluice.Limit, lease sluice.LeaseID) (bool, error) {
	held, err := l.inner.Release(ctx, key, limit, lease)
	l.logOp(ctx, opLevel(err), "rate limit lease release", key, err, func() []slog.Attr {
		return []slog.Attr{
			slog.Int64("limit", limit.Rate),
			slog.Duration("lease_ttl", limit.Lease),
			slog.Bool("held", held),
		}
	})
	return held, err
}

// Settle implements sluice.Limiter. Settlements are logged at Debug, failed ones at Warn
// (bad input: an unknown or settled reservation, at Info).
func (l *Limiter) Settle(ctx context.Context, key string, limit sluice.Limit, reservation sluice.ReservationID, cost int64) (sluice.Decision, error) {
	d, err := l.inner.Settle(ctx, key, limit, reservation, cost)
	level := opLevel(err)
	if store.IsBadInput(err) {
		level = slog.LevelInfo
	}
	l.logOp(ctx, level, "rate limit settlement", key, err, func() []slog.Attr {
		return append(limitAttrs(nil, limit),
			slog.Int64("cost", cost),
			slog.Int64("remaining", d.Remaining),
		)
	})
	return d, err
}

// opLevel is the level of an operation's log line: Debug, or Warn when it failed.
func opLevel(err error) slog.Level {
	if err != nil {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// logOp logs one operation on key at level, when the logger takes that level: the hashed
// key, the attributes attrs builds and, for a failed one, the error (the raw key
// redacted) and its kind.
func (l *Limiter) logOp(ctx context.Context, level slog.Level, msg, key string, err error, attrs func() []slog.Attr) {
	if l.logger == nil || !l.logger.Enabled(ctx, level) {
		return
	}
	as := append([]slog.Attr{slog.String("key", l.hash(key))}, attrs()...)
	if err != nil {
		as = append(as, slog.String("error", l.redact(err.Error(), key)), slog.String("error_kind", string(sluice.KindOf(err))))
	}
	l.logger.LogAttrs(ctx, level, msg, as...)
}

// Reset implements sluice.Limiter. Resets are logged at Info.
func (l *Limiter) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	err := l.inner.Reset(ctx, key, limit)
	l.logOp(ctx, slog.LevelInfo, "rate limit reset", key, err,
		func() []slog.Attr { return limitAttrs(nil, limit) })
	return err
}

// observe logs and records one decision, the request's of index batch in a call of size
// requests.
func (l *Limiter) observe(ctx context.Context, rep *sluice.Report, start time.Time, elapsed time.Duration, r *sluice.Request, d *sluice.Decision, err error, batch, size int) {
	policy := cmp.Or(r.Policy, l.policy)
	kind := cmp.Or(rep.Kind, sluice.KindOf(err))
	called := rep.StoreCalled && !(d.Path == sluice.PathCache && err == nil)
	storeLatency := rep.StoreLatency
	if called && storeLatency == 0 {
		storeLatency = elapsed // a store that does not time itself: the whole call
	}
	cause := cmp.Or(rep.Failure, err)
	if l.metrics != nil {
		l.metrics.record(policy, d, err, kind, rep.Breaker, storeLatency, called)
	}
	if l.logger == nil {
		return
	}
	now := start.Add(elapsed)
	if due := l.fails.due.Load(); due != 0 && now.UnixNano() >= due {
		l.fails.flush(l, ctx, now, false) // the summaries of an interval that is over
	}
	mode := "" // the failure mode, when one took part
	if failedOver(d.Path) || rep.Fallback.Mode != sluice.FailInherit {
		mode = rep.Fallback.Mode.String()
	}
	level := slog.LevelInfo
	if failedOver(d.Path) || cause != nil {
		level = slog.LevelWarn
		if l.fails.every > 0 && l.logger.Enabled(ctx, level) {
			k := failKey{policy: policy, kind: kind, mode: mode, path: d.Path}
			if !l.fails.note(l, now, k, d.Allowed, cause, r.Key) {
				return
			}
		}
	} else if (d.Allowed || d.Path == sluice.PathCache) && !l.sample() {
		return
	}
	if !l.logger.Enabled(ctx, level) {
		return
	}
	lim := d.Limit
	attrs := limitAttrs(append(make([]slog.Attr, 0, 24),
		slog.String("policy", policy),
		slog.String("key", l.hash(r.Key)),
	), lim)
	add := func(ok bool, as ...slog.Attr) { // the attributes as, when ok
		if ok {
			attrs = append(attrs, as...)
		}
	}
	add(!lim.Calendar.IsZero(), slog.String("calendar", lim.Calendar.String()))
	add(lim.Burst > 0, slog.Int64("burst", lim.Burst))
	attrs = append(attrs,
		slog.Int64("cost", r.N),
		slog.Bool("allowed", d.Allowed),
		slog.Int64("remaining", d.Remaining),
	)
	add(err == nil && d.Path != sluice.PathOpen && d.Path != sluice.PathClosed,
		slog.Int64("used", max(lim.MaxCost()-d.Remaining, 0)))
	attrs = append(attrs,
		logattr.Millis("retry_after_ms", d.RetryAfter),
		logattr.Millis("reset_after_ms", d.ResetAfter),
		slog.String("path", d.Path.String()),
	)
	add(r.Shadow, slog.Bool("shadow", true))
	add(mode != "", slog.String("mode", mode))
	add(mode != "" && rep.Fallback.Mode == sluice.FailLocal,
		slog.Float64("share", rep.Fallback.Share))
	add(rep.Breaker != store.BreakerNone, slog.String("breaker", rep.Breaker.String()))
	add(called, logattr.Micros("store_latency_us", storeLatency))
	attrs = append(attrs, logattr.Micros("latency_us", elapsed))
	add(size > 1, slog.Int("batch", batch), slog.Int("batch_size", size))
	if cause != nil {
		attrs = append(attrs, slog.String("error", l.redact(cause.Error(), r.Key)), slog.String("error_kind", string(kind)))
	}
	l.logger.LogAttrs(ctx, level, "rate limit decision", attrs...)
}

// sample reports whether this sampled decision (see WithSampling) is logged.
func (l *Limiter) sample() bool {
	if l.sampling <= 0 || l.sampling >= 1 {
		return l.sampling >= 1
	}
	i := l.n.Add(1)
	return uint64(float64(i)*l.sampling) > uint64(float64(i-1)*l.sampling)
}

// minRedactLen is the shortest key redact replaces in messages: shorter ones would
// garble the message and are no secret.
const minRedactLen = 4

// redact replaces key, as is and as %q would escape it, by its hash in msg.
func (l *Limiter) redact(msg, key string) string {
	if len(key) < minRedactLen {
		return msg
	}
	h, q := l.hash(key), strconv.Quote(key)
	return strings.ReplaceAll(strings.ReplaceAll(msg, key, h), q[1:len(q)-1], h)
}
