package failover

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Breaker configures the circuit breaker. Zero fields take the defaults given with each
// field.
//
// While closed, the breaker counts the store calls that answered in the last Window, in
// rolling one-tenth buckets (a bucket counts from the moment the breaker closed). It
// opens when ConsecutiveFailures calls in a row have failed, or when at least MinCalls
// calls answered in the Window and the share of failures among them reached
// FailureRatio; either way only once the failures have gone on for FailingFor
// (since the first of the streak, or the first in the Window).
//
// Open, it lets no call through for OpenFor, then turns half-open and lets Probes calls
// through: if they all succeed it closes (counts start afresh), and the first failure
// opens it again for another OpenFor. Each probe is a real decision sent to the store
// with ProbeTimeout, detached from the caller (who is still released at the deadline);
// it counts as a success only if it answered within the deadline. A probe that answers
// after its caller left has spent its units on top of the fallback decision: at most
// Probes units per OpenFor. The outcome of a call let through in one state is ignored
// once the breaker has left that state. docs/failover.md explains why.
//
// Only store failures count (see [store.IsFailure]): bad input, a caller's own cancellation
// or deadline, and a closed limiter neither trip the breaker nor count as successes.
type Breaker struct {
	// ConsecutiveFailures opens the breaker after this many failed calls in a row
	// (default 5), once the first of them is FailingFor old.
	ConsecutiveFailures uint32
	// FailingFor is how long failures must have gone on to open the breaker (default
	// 50ms). A negative value means no minimum.
	FailingFor time.Duration
	// FailureRatio opens the breaker when this share of the calls in the Window failed
	// (default 0.5), once MinCalls calls were made in it. Values outside (0, 1] take the
	// default.
	FailureRatio float64
	// MinCalls is the number of calls in the Window before FailureRatio applies
	// (default 20).
	MinCalls uint32
	// Window is the span over which calls are counted for FailureRatio (default 10s).
	Window time.Duration
	// OpenFor is how long the breaker stays open before probing (default 1s). It is also
	// the RetryAfter of decisions denied in FailClosed mode.
	OpenFor time.Duration
	// Probes is how many calls go through while half-open; this many successes in a row
	// close the breaker (default 3).
	Probes uint32
	// ProbeTimeout bounds a probe's store call (default 1s); see above.
	ProbeTimeout time.Duration
}

// withDefaults fills b's zero fields (and non-positive durations, but FailingFor's).
func (b Breaker) withDefaults() Breaker {
	if !(b.FailureRatio > 0 && b.FailureRatio <= 1) {
		b.FailureRatio = 0.5
	}
	b.ConsecutiveFailures = cmp.Or(b.ConsecutiveFailures, 5)
	b.FailingFor = cmp.Or(b.FailingFor, 50*time.Millisecond)
	b.MinCalls = cmp.Or(b.MinCalls, 20)
	b.Window = cmp.Or(max(b.Window, 0), 10*time.Second)
	b.OpenFor = cmp.Or(max(b.OpenFor, 0), time.Second)
	b.Probes = cmp.Or(b.Probes, 3)
	b.ProbeTimeout = cmp.Or(max(b.ProbeTimeout, 0), time.Second)
	return b
}

// numBuckets is how many buckets the Window is counted in.
const numBuckets = 10

// The breaker's refusals: open, and half-open with all its probes under way.
var (
	errOpenState     = errors.New("circuit breaker is open")
	errTooManyProbes = errors.New("too many requests")
)

// breaker is the circuit breaker that Breaker configures. Each state it enters is a
// generation of its own. While closed and healthy, letting a call through and counting
// its success take no lock and allocate nothing; failures, half-open probes and every
// state change hold mu.
type breaker struct {
	cfg      Breaker
	now      func() time.Time
	bucket   time.Duration // the length of one of the Window's numBuckets buckets
	onChange func(from, to sluice.BreakerState)
	cur      atomic.Pointer[generation]

	mu          sync.Mutex
	streak      uint32    // closed: consecutive failures
	streakStart time.Time // closed: the first failure of the streak
	windowStart time.Time // closed: the first failure counted in the Window
	probes      uint32    // half-open: probes let through, less those excluded
	probeOK     uint32    // half-open: probes that succeeded
}

// generation is one stay of the breaker in one state.
type generation struct {
	state sluice.BreakerState
	start time.Time // when the state was entered: the Window's buckets count from it
	until time.Time // open: when it turns half-open
	// closed: calls that succeeded and failed, by bucket; each word holds the bucket's
	// number (mod 2^32) in its high half and its count in its low half, so that a count
	// of a bucket that has rolled over is never added to the new one.
	succ, fail [numBuckets]atomic.Uint64
	failing    atomic.Bool // closed: a failure streak is under way
}

// ticket is a call let through by allow; the call's outcome goes to done with it.
type ticket struct{ g *generation }

func newBreaker(cfg Breaker, now func() time.Time, onChange func(from, to sluice.BreakerState)) *breaker {
	b := &breaker{cfg: cfg, now: now, bucket: cmp.Or(cfg.Window/numBuckets, cfg.Window), onChange: onChange}
	b.cur.Store(&generation{state: store.BreakerClosed, start: now()})
	return b
}

// allow lets a call through, or returns errOpenState (open) or errTooManyProbes
// (half-open, Probes probes under way). probe reports a half-open breaker's probe.
func (b *breaker) allow() (t ticket, probe bool, err error) {
	if g := b.cur.Load(); g.state == store.BreakerClosed {
		return ticket{g}, false, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.current(b.now())
	switch {
	case g.state == store.BreakerOpen:
		return ticket{}, false, errOpenState
	case g.state == store.BreakerHalfOpen && b.probes >= b.cfg.Probes:
		return ticket{}, false, errTooManyProbes
	case g.state == store.BreakerHalfOpen:
		b.probes++
		return ticket{g}, true, nil
	}
	return ticket{g}, false, nil
}

// done reports the outcome of a call let through with t, which ended at now: err nil
// for a success, errExcluded for an outcome that says nothing of the store, anything
// else for a failure.
func (b *breaker) done(t ticket, err error, now time.Time) {
	g := t.g
	if g.state == store.BreakerClosed && (err == nil || err == errExcluded) {
		if err != nil || b.cur.Load() != g {
			return
		}
		g.add(&g.succ, b.age(g, now))
		if g.failing.Load() {
			b.mu.Lock()
			if b.cur.Load() == g {
				b.streak = 0
				g.failing.Store(false)
			}
			b.mu.Unlock()
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cur.Load() != g {
		return
	}
	switch {
	case g.state == store.BreakerHalfOpen && err == errExcluded:
		b.probes-- // its place goes to another probe
	case g.state == store.BreakerHalfOpen && err == nil:
		if b.probeOK++; b.probeOK >= b.cfg.Probes {
			b.setState(store.BreakerClosed, now)
		}
	case g.state == store.BreakerHalfOpen:
		b.setState(store.BreakerOpen, now)
	case g.state == store.BreakerClosed:
		age := b.age(g, now)
		g.add(&g.fail, age)
		b.streak++
		g.failing.Store(true)
		if b.streak == 1 {
			b.streakStart = now
		}
		ok, failed := g.counts(age)
		if failed == 1 {
			b.windowStart = now
		}
		if (b.streak >= b.cfg.ConsecutiveFailures && now.Sub(b.streakStart) >= b.cfg.FailingFor) ||
			(ok+failed >= uint64(b.cfg.MinCalls) && float64(failed) >= b.cfg.FailureRatio*float64(ok+failed) &&
				now.Sub(b.windowStart) >= b.cfg.FailingFor) {
			b.setState(store.BreakerOpen, now)
		}
	}
}

// state returns the breaker's state at now, turning an open breaker whose OpenFor has
// passed half-open.
func (b *breaker) state(now time.Time) sluice.BreakerState {
	if g := b.cur.Load(); g.state == store.BreakerClosed {
		return g.state
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.current(now).state
}

// current returns the generation in force at now, making the due change from open to
// half-open. b.mu is held.
func (b *breaker) current(now time.Time) *generation {
	g := b.cur.Load()
	if g.state == store.BreakerOpen && now.After(g.until) {
		b.setState(store.BreakerHalfOpen, now)
		g = b.cur.Load()
	}
	return g
}

// setState starts a generation in state to at now and reports the change. b.mu is held.
func (b *breaker) setState(to sluice.BreakerState, now time.Time) {
	from := b.cur.Load().state
	if from == to {
		return
	}
	g := &generation{state: to, start: now}
	if to == store.BreakerOpen {
		g.until = now.Add(b.cfg.OpenFor)
	}
	b.streak, b.probes, b.probeOK = 0, 0, 0
	b.cur.Store(g)
	if b.onChange != nil {
		b.onChange(from, to)
	}
}

// age returns the number of the bucket now falls in, counted from g's start.
func (b *breaker) age(g *generation, now time.Time) uint64 {
	return uint64(max(now.Sub(g.start), 0) / b.bucket)
}

// add adds one call to bucket age of counts.
func (g *generation) add(counts *[numBuckets]atomic.Uint64, age uint64) {
	w := &counts[age%numBuckets]
	tag := age << 32
	for {
		v := w.Load()
		n := tag | 1
		if v>>32 == age&(1<<32-1) {
			n = v + 1
		}
		if w.CompareAndSwap(v, n) {
			return
		}
	}
}

// counts returns the successes and failures counted in the Window that ends in bucket
// age: that bucket and the numBuckets-1 before it.
func (g *generation) counts(age uint64) (ok, failed uint64) {
	sum := func(w *atomic.Uint64) uint64 {
		if v := w.Load(); v != 0 && (age-v>>32)&(1<<32-1) < numBuckets {
			return v & (1<<32 - 1)
		}
		return 0
	}
	for i := range numBuckets {
		ok, failed = ok+sum(&g.succ[i]), failed+sum(&g.fail[i])
	}
	return ok, failed
}

// errExcluded is reported to the breaker for outcomes that say nothing about the store's
// health (bad input, the caller's own cancellation).
var errExcluded = fmt.Errorf("failover: excluded from breaker counts")
