package failover

import (
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/store"
)

// breakerAt is a breaker under test, its changes recorded.
type breakerAt struct {
	*breaker
	clk     *clocktest.Clock
	changes []string
}

func testBreaker(t *testing.T, cfg Breaker) *breakerAt {
	t.Helper()
	b := &breakerAt{clk: clocktest.New(time.Now())}
	b.breaker = newBreaker(cfg.withDefaults(), b.clk.Now, func(from, to sluice.BreakerState) {
		b.changes = append(b.changes, from.String()+">"+to.String())
	})
	return b
}

var errStore = &sluice.StoreError{Kind: store.KindTimeout, Err: errors.New("store down")}

// call lets one call through and reports outcome at now; it fails the test if the
// breaker refuses.
func (b *breakerAt) call(t *testing.T, outcome error, now time.Time) {
	t.Helper()
	b.clk.Set(now)
	tk, _, err := b.allow()
	if err != nil {
		t.Fatalf("refused at %v: %v", now, err)
	}
	b.done(tk, outcome, now)
}

func (b *breakerAt) want(t *testing.T, now time.Time, s sluice.BreakerState) {
	t.Helper()
	if got := b.state(now); got != s {
		t.Fatalf("state at %v: %v, want %v (changes %v)", now, got, s, b.changes)
	}
}

// TestBreakerConsecutive: closed to open on ConsecutiveFailures failures in a row once
// the streak is FailingFor old; a success ends the streak; excluded outcomes neither
// count nor end it.
func TestBreakerConsecutive(t *testing.T) {
	b := testBreaker(t, Breaker{ConsecutiveFailures: 3, FailingFor: 50 * time.Millisecond, MinCalls: 1 << 30})
	t0 := b.cur.Load().start
	b.call(t, errStore, t0)
	b.call(t, errStore, t0.Add(10*time.Millisecond))
	b.call(t, nil, t0.Add(20*time.Millisecond)) // ends the streak
	b.call(t, errStore, t0.Add(30*time.Millisecond))
	b.call(t, errExcluded, t0.Add(35*time.Millisecond))
	b.call(t, errStore, t0.Add(40*time.Millisecond))
	b.call(t, errStore, t0.Add(50*time.Millisecond)) // 3 in a row, but only 20ms old
	b.want(t, t0.Add(50*time.Millisecond), store.BreakerClosed)
	b.call(t, errStore, t0.Add(80*time.Millisecond)) // 50ms since the streak's first
	b.want(t, t0.Add(80*time.Millisecond), store.BreakerOpen)
	if _, _, err := b.allow(); !errors.Is(err, errOpenState) {
		t.Fatalf("open breaker let a call through: %v", err)
	}
	if len(b.changes) != 1 || b.changes[0] != "closed>open" {
		t.Fatalf("changes %v", b.changes)
	}
}

// TestBreakerRatio: closed to open when FailureRatio of at least MinCalls answered calls
// in the Window failed, once FailingFor after the Window's first failure; calls that
// left the Window no longer count.
func TestBreakerRatio(t *testing.T) {
	b := testBreaker(t, Breaker{ConsecutiveFailures: 1 << 30, FailingFor: -1, FailureRatio: 0.5, MinCalls: 4, Window: 10 * time.Second})
	t0 := b.cur.Load().start
	b.call(t, nil, t0)
	b.call(t, nil, t0)
	b.call(t, nil, t0)
	// Twelve seconds on, the three successes have left the Window.
	at := t0.Add(12 * time.Second)
	b.call(t, errStore, at)
	b.call(t, nil, at)
	b.call(t, errExcluded, at) // not a call answered by the store
	b.call(t, nil, at)
	b.want(t, at, store.BreakerClosed) // 1 of 3
	b.call(t, errStore, at)            // 2 of 4: half
	b.want(t, at, store.BreakerOpen)

	// With the old successes still in the Window, the same calls would not trip it.
	b = testBreaker(t, Breaker{ConsecutiveFailures: 1 << 30, FailingFor: -1, FailureRatio: 0.5, MinCalls: 4, Window: 10 * time.Second})
	t0 = b.cur.Load().start
	for range 3 {
		b.call(t, nil, t0)
	}
	at = t0.Add(5 * time.Second)
	b.call(t, errStore, at)
	b.call(t, nil, at)
	b.call(t, nil, at)
	b.call(t, errStore, at) // 2 of 7
	b.want(t, at, store.BreakerClosed)
}

// TestBreakerHalfOpen: open to half-open after OpenFor; Probes probes go through and no
// more; all succeeding closes it with counts afresh; a failing probe opens it again; an
// excluded probe gives its place back.
func TestBreakerHalfOpen(t *testing.T) {
	b := testBreaker(t, Breaker{ConsecutiveFailures: 1, FailingFor: -1, OpenFor: time.Second, Probes: 2})
	t0 := b.cur.Load().start
	b.call(t, errStore, t0)
	b.want(t, t0.Add(time.Second), store.BreakerOpen)
	at := t0.Add(time.Second + time.Millisecond)
	b.want(t, at, store.BreakerHalfOpen)

	p1, probe, err := b.allow()
	if err != nil || !probe {
		t.Fatalf("first probe: %v %v", probe, err)
	}
	p2, _, err := b.allow()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.allow(); !errors.Is(err, errTooManyProbes) {
		t.Fatalf("third call while half-open: %v", err)
	}
	b.done(p1, errExcluded, at) // its place goes to another probe
	p3, _, err := b.allow()
	if err != nil {
		t.Fatalf("probe after an excluded one: %v", err)
	}
	b.done(p2, nil, at)
	b.want(t, at, store.BreakerHalfOpen)
	b.done(p3, nil, at)
	b.want(t, at, store.BreakerClosed)

	// Counts start afresh: one failure (ConsecutiveFailures 1) opens it again; a failed
	// probe opens it at once.
	b.call(t, errStore, at)
	b.want(t, at, store.BreakerOpen)
	at = at.Add(2 * time.Second)
	b.want(t, at, store.BreakerHalfOpen)
	b.call(t, nil, at)
	b.call(t, errStore, at)
	b.want(t, at, store.BreakerOpen)
	want := []string{"closed>open", "open>half_open", "half_open>closed", "closed>open", "open>half_open", "half_open>open"}
	if len(b.changes) != len(want) {
		t.Fatalf("changes %v, want %v", b.changes, want)
	}
	for i := range want {
		if b.changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", b.changes, want)
		}
	}
}

// TestBreakerGenerations: the outcome of a call let through in a state the breaker has
// since left is ignored.
func TestBreakerGenerations(t *testing.T) {
	b := testBreaker(t, Breaker{ConsecutiveFailures: 2, FailingFor: -1, OpenFor: time.Second, Probes: 1})
	t0 := b.cur.Load().start
	old, _, _ := b.allow() // let through while closed, answers late
	b.call(t, errStore, t0)
	b.call(t, errStore, t0)
	b.want(t, t0, store.BreakerOpen)
	at := t0.Add(2 * time.Second)
	b.want(t, at, store.BreakerHalfOpen)
	b.done(old, errStore, at) // from the closed generation: no effect on the probe
	b.want(t, at, store.BreakerHalfOpen)
	b.call(t, nil, at)
	b.want(t, at, store.BreakerClosed)
	b.done(old, errStore, at) // nor on the new closed generation
	if ok, failed := b.cur.Load().counts(0); ok != 0 || failed != 0 {
		t.Fatalf("counts of the new generation: %d ok, %d failed", ok, failed)
	}
}

// TestBreakerBucketRoll: a bucket's word reused by a later bucket starts from zero.
func TestBreakerBucketRoll(t *testing.T) {
	var g generation
	g.add(&g.succ, 3)
	g.add(&g.succ, 3)
	g.add(&g.fail, 4)
	if ok, failed := g.counts(4); ok != 2 || failed != 1 {
		t.Fatalf("counts %d %d, want 2 1", ok, failed)
	}
	g.add(&g.succ, 13) // the same word as bucket 3
	if ok, failed := g.counts(13); ok != 1 || failed != 1 {
		t.Fatalf("counts after the roll %d %d, want 1 1", ok, failed)
	}
	if ok, failed := g.counts(14); ok != 1 || failed != 0 {
		t.Fatalf("counts a bucket later %d %d, want 1 0", ok, failed)
	}
}

// TestBreakerClosedAllocs: letting a call through a closed breaker and counting its
// success allocates nothing.
func TestBreakerClosedAllocs(t *testing.T) {
	b := testBreaker(t, Breaker{})
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() {
		tk, _, _ := b.allow()
		b.done(tk, nil, now)
	}); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
}
