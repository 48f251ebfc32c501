package overload

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"
)

// Limiter is an adaptive concurrency limit with priority shedding; see the package doc.
// Its methods are safe for concurrent use. Create it with New.
type Limiter struct {
	s     settings
	epoch time.Time // the clock's reading at New; instants are ns since then

	mu       sync.Mutex
	g        gradient
	inflight int64
	waiting  [2]list.List // of *waiter: Default, Critical
	// The open window: when it opened (ns), its samples' sum (ns) and count, and the most
	// requests in flight during it.
	winStart, winSum, winCount, winPeak int64
	short                               int64 // the last closed window's mean latency, ns

	queued func() // tests: called, under the lock, when a request joins the queue
}

// Permit is one admitted request. Exactly one of Release and Drop ends it; later calls do
// nothing.
type Permit struct {
	l     *Limiter
	start int64 // ns since the limiter's epoch, at admission
	done  bool  // guarded by l.mu
}

// Reasons a request is shed, in Shed.Reason.
const (
	ReasonLimit        = "limit"         // no permit free to its criticality, and it may not queue
	ReasonQueueFull    = "queue_full"    // the queue held MaxQueue requests
	ReasonQueueTimeout = "queue_timeout" // it waited its longest (MaxWait) without a permit
	ReasonCanceled     = "canceled"      // its context ended first
)

// Shed is the error Acquire returns for a request it does not admit. For Reason
// "canceled" it wraps the context's error.
type Shed struct {
	Criticality Criticality
	Reason      string
	// RetryAfter suggests when to try again: the latest window's mean latency rounded up
	// to whole seconds, at least 1s.
	RetryAfter time.Duration

	cause error
}

func (e *Shed) Error() string {
	return fmt.Sprintf("overload: %s request shed: %s", e.Criticality, e.Reason)
}

// Unwrap returns the context's error for a request shed because its context ended.
func (e *Shed) Unwrap() error { return e.cause }

// Stats is a snapshot of a Limiter, for gauges.
type Stats struct {
	Limit    int // the requests in flight the limit admits now
	InFlight int // permits held
	Queued   int // requests waiting for a permit
}

type waiter struct {
	c        Criticality
	deadline int64 // ns since the epoch
	elem     *list.Element
	done     func(*Permit, error) // called once, under the lock, with the outcome
}

// New returns a Limiter for c, or an error wrapping ErrInvalidConfig.
func New(c Config) (*Limiter, error) {
	s, err := c.settings()
	if err != nil {
		return nil, err
	}
	return &Limiter{s: s, epoch: s.clock(), g: gradient{limit: s.initial * 1000}}, nil
}

func (l *Limiter) now() int64 { return int64(l.s.clock().Sub(l.epoch)) }

// Acquire admits a request of criticality c, or sheds it with a *Shed error.
//
// A request is admitted at once when fewer requests than its criticality's share of the
// limit are in flight and no request of its criticality or higher is waiting. Otherwise a
// Sheddable request is shed, and a Critical or Default one waits in the queue, for at
// most MaxWait or until ctx ends, for a permit: whenever a permit is ended or the limit
// rises, waiting Critical requests are admitted first, then Default ones, each class in
// the order it arrived, each while in flight is below its share. A request already
// admitted when ctx ends keeps its permit. A criticality outside the three counts as the
// nearest of them.
//
// The caller must end every permit with Release or Drop.
func (l *Limiter) Acquire(ctx context.Context, c Criticality) (*Permit, error) {
	c = c.valid()
	if err := ctx.Err(); err != nil {
		return nil, l.shedding(c, ReasonCanceled, err)
	}
	type outcome struct {
		p   *Permit
		err error
	}
	ready := make(chan outcome, 1) // done never blocks under the lock
	w, wait := l.enqueue(c, func(p *Permit, err error) { ready <- outcome{p, err} })
	if w != nil {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case o := <-ready:
			return o.p, o.err
		case <-ctx.Done():
			l.cancel(w, ReasonCanceled, ctx.Err())
		case <-t.C:
			l.cancel(w, ReasonQueueTimeout, nil)
		}
	}
	o := <-ready // decided at once, or by cancel, or admitted just before it
	return o.p, o.err
}

// Enqueue is Acquire for a caller that must not block a goroutine per request, such as
// an event loop or a simulation on a virtual clock. It decides as Acquire does and never
// waits: done is called exactly once with the outcome, the *Permit or a *Shed error.
// A request admitted or shed at once has done called before Enqueue returns; one that
// waits has it called by the Acquire, Enqueue, Release, Drop or cancel that admits or
// sheds it. done is called with the Limiter's lock held, so it must not call the
// Limiter or a Permit; it hands the outcome on (to a channel, an event queue).
//
// No timer runs for a request that waits: it is shed for queue_timeout by the first
// call that reads the clock its wait (MaxWait) after it queued. cancel sheds it, if it
// still waits, with reason "canceled" wrapping cause (its client has gone); after its
// outcome, cancel does nothing.
func (l *Limiter) Enqueue(c Criticality, done func(*Permit, error)) (cancel func(cause error)) {
	w, _ := l.enqueue(c.valid(), done)
	return func(cause error) {
		if w != nil {
			l.cancel(w, ReasonCanceled, cause)
		}
	}
}

// enqueue decides a request of criticality c, calling done under the lock when it is
// admitted or shed. It returns the waiter, and how long it may wait, when the request
// joins the queue; nil when it was decided at once.
func (l *Limiter) enqueue(c Criticality, done func(*Permit, error)) (*waiter, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.expire(now)
	if l.admits(c) {
		done(l.grant(now), nil)
		return nil, 0
	}
	if c == Sheddable || !l.s.queue {
		done(nil, l.shedLocked(c, ReasonLimit, nil))
		return nil, 0
	}
	if l.waiting[0].Len()+l.waiting[1].Len() >= l.s.maxQueue {
		back := l.waiting[0].Back()
		if c != Critical || back == nil {
			done(nil, l.shedLocked(c, ReasonQueueFull, nil))
			return nil, 0
		}
		l.finish(back.Value.(*waiter), nil, l.shedLocked(Default, ReasonQueueFull, nil))
	}
	wait := l.wait()
	w := &waiter{c: c, deadline: now + int64(wait), done: done}
	w.elem = l.waiting[c].PushBack(w)
	if l.queued != nil {
		l.queued()
	}
	return w, wait
}

// cancel sheds w for reason, if it still waits.
func (l *Limiter) cancel(w *waiter, reason string, cause error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.elem != nil {
		l.finish(w, nil, l.shedLocked(w.c, reason, cause))
	}
}

// Release ends the permit and takes its latency, from Acquire to Release on the clock,
// as a sample of the service's latency.
func (p *Permit) Release() { p.end(true) }

// Drop ends the permit without a sample: for a request that did not reach the service or
// whose latency says nothing of it (denied by a rate limit, abandoned by its client).
func (p *Permit) Drop() { p.end(false) }

func (p *Permit) end(sample bool) {
	if p == nil {
		return
	}
	l := p.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	l.inflight--
	now := l.now()
	if now < l.winStart {
		l.winStart = now
	}
	if d := now - p.start; sample && d >= 0 && (!l.g.pinned || p.start >= l.winStart) {
		l.winSum += min(d, maxSample)
		l.winCount++
		if now-l.winStart >= l.s.window && l.winCount >= l.s.minSamples {
			l.short = l.winSum / l.winCount
			l.g.update(&l.s, now, l.short, l.winPeak)
			l.winStart, l.winSum, l.winCount, l.winPeak = now, 0, 0, l.inflight
		}
	}
	l.expire(now)
	l.dispatch(now)
}

// Stats returns the limit, the permits held and the requests waiting.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Limit: int(l.g.permits(&l.s)), InFlight: int(l.inflight), Queued: l.waiting[0].Len() + l.waiting[1].Len()}
}

// wait is how long a request queued now may wait: MaxWait, or DefaultWaitLatencies
// long-term latencies.
func (l *Limiter) wait() time.Duration {
	switch {
	case l.s.maxWait > 0:
		return l.s.maxWait
	case l.g.long > 0:
		return time.Duration(l.g.long * DefaultWaitLatencies)
	}
	return DefaultMaxWait
}

// share is how many requests of criticality c may be in flight at once.
func (l *Limiter) share(c Criticality) int64 {
	return l.g.permits(&l.s) * l.s.share[c+1] / 100
}

// admits reports whether a request of criticality c may be admitted now: nothing of its
// criticality or higher waits, and in flight is below its share.
func (l *Limiter) admits(c Criticality) bool {
	if l.waiting[1].Len() > 0 || (c <= Default && l.waiting[0].Len() > 0) {
		return false
	}
	return l.inflight < l.share(c)
}

func (l *Limiter) grant(now int64) *Permit {
	l.inflight++
	l.winPeak = max(l.winPeak, l.inflight)
	return &Permit{l: l, start: now}
}

// dispatch admits waiters, Critical first, while their shares allow.
func (l *Limiter) dispatch(now int64) {
	for c := Critical; c >= Default; c-- {
		for e := l.waiting[c].Front(); e != nil && l.inflight < l.share(c); e = l.waiting[c].Front() {
			l.finish(e.Value.(*waiter), l.grant(now), nil)
		}
	}
}

// expire sheds the waiters whose wait has passed on the clock, from the front of each
// queue (a waiter behind one that has not expired waits for its timer).
func (l *Limiter) expire(now int64) {
	for c := Default; c <= Critical; c++ {
		for e := l.waiting[c].Front(); e != nil && e.Value.(*waiter).deadline <= now; e = l.waiting[c].Front() {
			l.finish(e.Value.(*waiter), nil, l.shedLocked(c, ReasonQueueTimeout, nil))
		}
	}
}

// finish takes w out of the queue and hands it its outcome.
func (l *Limiter) finish(w *waiter, p *Permit, s *Shed) {
	l.waiting[w.c].Remove(w.elem)
	w.elem = nil
	if s != nil {
		w.done(nil, s)
		return
	}
	w.done(p, nil)
}

func (l *Limiter) shedding(c Criticality, reason string, cause error) *Shed {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shedLocked(c, reason, cause)
}

func (l *Limiter) shedLocked(c Criticality, reason string, cause error) *Shed {
	secs := max((l.short+int64(time.Second)-1)/int64(time.Second), 1)
	return &Shed{Criticality: c, Reason: reason, RetryAfter: time.Duration(secs) * time.Second, cause: cause}
}
