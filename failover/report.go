package failover

import (
	"context"
	"time"
)

// Report is what the Limiter did for one decision, for logs and metrics (package observe
// reads it). Pass a *Report in the context with WithReport and read it after the call
// returns; the Limiter fills it during the call. A Report must not be shared by
// concurrent calls.
type Report struct {
	// Called reports whether the store was called (false when the breaker was open, the
	// limiter overloaded or closed, or the input bad).
	Called bool
	// StoreLatency is the time from calling the store until its answer or the deadline.
	StoreLatency time.Duration
	// Cause is the store failure that made the failure mode decide (the store's error,
	// ErrDeadline, or an error wrapping ErrBreakerOpen or ErrOverload); nil when the store
	// decided.
	Cause error
	// Kind classifies Cause, or the error returned when the store answered with one that
	// is not a failure (bad input, a canceled context); "" when there was none.
	Kind Kind
	// Fallback is the resolved Fallback, when the failure mode decided.
	Fallback Fallback
	// Breaker is the breaker's state after the decision.
	Breaker BreakerState

	set bool
}

// Filled reports whether a Limiter filled r (that is, the call went through one).
func (r *Report) Filled() bool { return r.set }

type reportKey struct{}

// WithReport returns a context asking the Limiter to fill r.
func WithReport(ctx context.Context, r *Report) context.Context {
	return context.WithValue(ctx, reportKey{}, r)
}

// NewReport returns a context asking the Limiter to fill a new Report, and the Report:
// WithReport(ctx, new(Report)) in one allocation instead of two.
func NewReport(ctx context.Context) (context.Context, *Report) {
	c := &reportCtx{Context: ctx}
	return c, &c.r
}

// reportCtx is a context carrying a Report of its own.
type reportCtx struct {
	context.Context
	r Report
}

func (c *reportCtx) Value(key any) any {
	if _, ok := key.(reportKey); ok {
		return &c.r
	}
	return c.Context.Value(key)
}

func (c *reportCtx) String() string { return "failover.NewReport" }

func reportFrom(ctx context.Context) *Report {
	r, _ := ctx.Value(reportKey{}).(*Report)
	return r
}
