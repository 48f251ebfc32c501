package observe

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/logattr"
)

// DefaultFailureSummary is the interval over which failure decisions are summarised
// unless WithFailureSummary says otherwise.
const DefaultFailureSummary = 10 * time.Second

// WithFailureSummary sets the interval of the failure summary (docs/decision-log.md;
// default DefaultFailureSummary). Zero or negative turns summarising off: every failure
// decision is then a line of its own, so an outage logs as many lines as it has requests.
func WithFailureSummary(every time.Duration) Option {
	return func(o *Limiter) { o.fails.every = every }
}

// failKey is what failure decisions are grouped by.
type failKey struct {
	policy string
	kind   sluice.ErrorKind
	mode   string // the failure mode that decided, "" when an error was returned
	path   sluice.Path
}

type failCount struct {
	allowed, denied int64 // decisions after the first, not logged on their own
	errMsg          string
}

// failures counts failure decisions per interval: the first of each group in an interval is
// logged in full, the rest are counted and written as one summary per group when the
// interval is over (noticed at the next decision, or at Flush).
type failures struct {
	every  time.Duration
	mu     sync.Mutex
	start  time.Time
	groups map[failKey]*failCount
	due    atomic.Int64 // UnixNano at which the current interval ends; 0: nothing counted
}

// note records a failure decision at now, caused by cause (nil if none) on key, and
// reports whether it is the first of its group in the interval (and so logged in full).
func (f *failures) note(l *Limiter, now time.Time, k failKey, allowed bool,
	cause error, key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.groups) == 0 {
		f.start = now
		f.due.Store(now.Add(f.every).UnixNano())
	}
	g, seen := f.groups[k]
	if !seen {
		f.groups[k] = &failCount{}
		return true
	}
	if allowed {
		g.allowed++
	} else {
		g.denied++
	}
	if g.errMsg == "" && cause != nil {
		g.errMsg = l.redact(cause.Error(), key)
	}
	return false
}

// flush ends the interval under way if it is over at now, or with force whenever one is
// under way, and writes a summary for each of its groups that suppressed lines.
func (f *failures) flush(l *Limiter, ctx context.Context, now time.Time, force bool) {
	f.mu.Lock()
	var lines [][]slog.Attr
	if d := f.due.Load(); d != 0 && (force || now.UnixNano() >= d) {
		for k, g := range f.groups {
			if g.allowed+g.denied == 0 {
				continue
			}
			attrs := []slog.Attr{
				slog.String("policy", k.policy),
				slog.String("error_kind", string(k.kind)),
				slog.String("path", k.path.String()),
			}
			if k.mode != "" {
				attrs = append(attrs, slog.String("mode", k.mode))
			}
			attrs = append(attrs,
				slog.Int64("suppressed", g.allowed+g.denied),
				slog.Int64("allowed", g.allowed),
				slog.Int64("denied", g.denied),
				slog.Time("since", f.start),
				logattr.Millis("interval_ms", now.Sub(f.start)),
			)
			if g.errMsg != "" {
				attrs = append(attrs, slog.String("error", g.errMsg))
			}
			lines = append(lines, attrs)
		}
		clear(f.groups)
		f.due.Store(0)
	}
	f.mu.Unlock()
	for _, attrs := range lines {
		l.logger.LogAttrs(ctx, slog.LevelWarn, "rate limit failures", attrs...)
	}
}

// Flush writes the failure summary of the current interval now, without waiting for it to
// end. Call it before the process exits so that no counted failure goes unreported.
func (l *Limiter) Flush() {
	if l.logger != nil {
		l.fails.flush(l, context.Background(), time.Now(), true)
	}
}
