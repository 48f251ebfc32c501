package failover

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineShares is how many shared deadlines one decision deadline spans: decisions
// that start within deadline/deadlineShares of one another share one timer.
const deadlineShares = 16

// sharedDeadlines hands out the contexts of inline store calls (WithInlineCalls) in place
// of a context.WithTimeout each: the decisions that start within slack of one another
// share one timer and one channel, closed at the deadline of the first of them, and their
// contexts are allocated deadlineChunk at a time (ctxChunk). Every decision gets between
// deadline−slack and deadline, never more.
type sharedDeadlines struct {
	d, slack time.Duration
	cur      atomic.Pointer[sharedDeadline]
	mu       sync.Mutex // held to replace cur
	chunk    atomic.Pointer[ctxChunk]
}

func newSharedDeadlines(d time.Duration) *sharedDeadlines {
	return &sharedDeadlines{d: d, slack: d / deadlineShares}
}

// context returns the context of a store call that starts at now (a reading of
// time.Now) on behalf of parent: parent itself when parent's own deadline comes first or
// it has already ended, else a context carrying parent's values that ends at a shared
// deadline in (now+d−slack, now+d]. It does not end when parent is cancelled.
func (s *sharedDeadlines) context(parent context.Context, now time.Time) context.Context {
	if pd, ok := parent.Deadline(); (ok && pd.Sub(now) <= s.d) || parent.Err() != nil {
		return parent
	}
	g := s.cur.Load()
	if g == nil || !s.fits(g, now) {
		s.mu.Lock()
		if g = s.cur.Load(); g == nil || !s.fits(g, now) {
			g = &sharedDeadline{start: now, at: now.Add(s.d), done: make(chan struct{})}
			time.AfterFunc(s.d, g.expire)
			s.cur.Store(g)
		}
		s.mu.Unlock()
	}
	return s.newCtx(parent, g)
}

// fits reports whether g serves a call that starts at now: g's deadline is in
// (now+d−slack, now+d], that is g started in (now−slack, now].
func (s *sharedDeadlines) fits(g *sharedDeadline, now time.Time) bool {
	early := now.Sub(g.start)
	return early >= 0 && early < s.slack
}

// deadlineChunk is how many deadlineCtx are made at once (ctxChunk).
const deadlineChunk = 32

// ctxChunk holds the contexts of deadlineChunk store calls, handed out in turn and each
// used once. A context in use keeps the chunk's other parents reachable.
type ctxChunk struct {
	next atomic.Int32 // the index of the next context to hand out
	ctxs [deadlineChunk]deadlineCtx
}

// newCtx returns a context of parent's values that ends with g, from the current chunk
// or, once it is used up, a new one.
func (s *sharedDeadlines) newCtx(parent context.Context, g *sharedDeadline) *deadlineCtx {
	for {
		ch := s.chunk.Load()
		if ch != nil {
			if i := ch.next.Add(1) - 1; i < deadlineChunk {
				c := &ch.ctxs[i]
				c.Context, c.g = parent, g
				return c
			}
		}
		s.chunk.CompareAndSwap(ch, &ctxChunk{}) // used up: the next turn takes a fresh one
	}
}

// sharedDeadline is one deadline shared by the store calls that started within slack.
type sharedDeadline struct {
	start   time.Time // at less the decision deadline
	at      time.Time
	done    chan struct{}
	expired atomic.Bool

	mu    sync.Mutex
	funcs map[*afterFunc]struct{} // registered by AfterFunc, run at expiry
	fired bool
}

type afterFunc struct{ f func() }

func (g *sharedDeadline) expire() {
	g.expired.Store(true)
	close(g.done)
	g.mu.Lock()
	g.fired = true
	funcs := g.funcs
	g.funcs = nil
	g.mu.Unlock()
	for a := range funcs {
		go a.f()
	}
}

// deadlineCtx is the context of one store call: the caller's values, the shared
// deadline's Done, Err and Deadline.
type deadlineCtx struct {
	context.Context
	g *sharedDeadline
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.g.at, true }
func (c *deadlineCtx) Done() <-chan struct{}       { return c.g.done }

func (c *deadlineCtx) Err() error {
	if c.g.expired.Load() {
		<-c.g.done // set just before done is closed: wait for the close
		return context.DeadlineExceeded
	}
	return nil
}

// AfterFunc runs f in its own goroutine once the context has ended, unless stop is
// called first. context.AfterFunc and the contexts derived from this one use it, so that
// they need no goroutine to watch Done.
func (c *deadlineCtx) AfterFunc(f func()) (stop func() bool) {
	g := c.g
	a := &afterFunc{f: f}
	g.mu.Lock()
	if g.fired {
		g.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	if g.funcs == nil {
		g.funcs = map[*afterFunc]struct{}{}
	}
	g.funcs[a] = struct{}{}
	g.mu.Unlock()
	return func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		if _, ok := g.funcs[a]; !ok {
			return false
		}
		delete(g.funcs, a)
		return true
	}
}

// String describes the context, as the standard library's contexts do.
func (c *deadlineCtx) String() string {
	return "failover.deadline(" + c.g.at.String() + ")"
}
