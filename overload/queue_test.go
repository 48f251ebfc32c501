package overload

import (
	"context"
	"errors"
	"testing"
	"time"
)

type acquired struct {
	c   Criticality
	p   *Permit
	err error
}

// waitQueued makes l report each request that joins its queue, and returns a function
// that starts an Acquire and returns once the request is queued (or decided), with the
// channel its outcome arrives on.
func waitQueued(l *Limiter) func(ctx context.Context, c Criticality) <-chan acquired {
	joined := make(chan struct{}, 1024)
	l.queued = func() { joined <- struct{}{} }
	return func(ctx context.Context, c Criticality) <-chan acquired {
		out := make(chan acquired, 1)
		go func() {
			p, err := l.Acquire(ctx, c)
			out <- acquired{c, p, err}
		}()
		select {
		case <-joined:
		case r := <-out: // decided without queueing
			out <- r
		}
		return out
	}
}

func shedReason(t *testing.T, err error) string {
	t.Helper()
	var s *Shed
	if !errors.As(err, &s) {
		t.Fatalf("error %v is not a *Shed", err)
	}
	return s.Reason
}

// TestQueueOrder: waiters are admitted Critical first, then Default, each class in the
// order it arrived, one per permit ended; Sheddable requests never queue.
func TestQueueOrder(t *testing.T) {
	ctx := context.Background()
	l, _ := newLimiter(t, Config{MinLimit: 2, MaxLimit: 2, CriticalReserve: -1, MaxWait: time.Hour})
	start := waitQueued(l)
	a, _ := l.Acquire(ctx, Default)
	b, _ := l.Acquire(ctx, Default)
	var outs []<-chan acquired
	for _, c := range []Criticality{Default, Critical, Default, Critical} {
		outs = append(outs, start(ctx, c))
	}
	if _, err := l.Acquire(ctx, Sheddable); shedReason(t, err) != ReasonLimit {
		t.Fatalf("a Sheddable request queued or was admitted: %v", err)
	}
	if st := l.Stats(); st != (Stats{Limit: 2, InFlight: 2, Queued: 4}) {
		t.Fatalf("Stats: %+v", st)
	}
	held := []*Permit{a, b}
	for _, want := range []int{1, 3, 0, 2} { // the Critical waiters, then the Default ones
		held[0].Release()
		held = held[1:]
		r := <-outs[want]
		if r.err != nil {
			t.Fatalf("waiter %d (%v): %v", want, r.c, r.err)
		}
		held = append(held, r.p)
		if st := l.Stats(); st.InFlight != 2 {
			t.Fatalf("after admitting waiter %d: %+v", want, st)
		}
	}
}

// TestArrivalDoesNotPass: a new Default request does not take a free permit while a
// Default request waits, but a Critical one passes a waiting Default request.
func TestArrivalDoesNotPass(t *testing.T) {
	ctx := context.Background()
	l, _ := newLimiter(t, Config{MinLimit: 5, MaxLimit: 5, MaxWait: time.Hour}) // Default's share: 4
	start := waitQueued(l)
	for range 4 {
		l.Acquire(ctx, Default)
	}
	waiting := start(ctx, Default)
	ctx2, cancel := context.WithCancel(ctx)
	second := start(ctx2, Default)
	if p, err := l.Acquire(ctx, Critical); err != nil || p == nil {
		t.Fatalf("Critical beside waiting Default requests: %v", err)
	}
	cancel()
	if r := <-second; shedReason(t, r.err) != ReasonCanceled || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled waiter: %v", r.err)
	}
	select {
	case r := <-waiting:
		t.Fatalf("the first waiter was decided with nothing released: %+v", r)
	default:
	}
}

// TestMaxWaitOnClock: a waiter is shed with queue_timeout once the clock has passed
// MaxWait since it queued, at the next call that reads the clock.
func TestMaxWaitOnClock(t *testing.T) {
	ctx := context.Background()
	l, clk := newLimiter(t, Config{MinLimit: 1, MaxLimit: 1, CriticalReserve: -1, MaxWait: time.Hour})
	start := waitQueued(l)
	held, _ := l.Acquire(ctx, Critical)
	out := start(ctx, Default)
	clk.advance(time.Hour - 1)
	l.Acquire(ctx, Sheddable) // reads the clock: not yet
	select {
	case r := <-out:
		t.Fatalf("shed before MaxWait: %+v", r)
	default:
	}
	clk.advance(1)
	held.Release() // expires the waiter before the freed permit is handed out
	if r := <-out; shedReason(t, r.err) != ReasonQueueTimeout {
		t.Fatalf("after MaxWait: %v", r.err)
	}
	if st := l.Stats(); st != (Stats{Limit: 1}) {
		t.Errorf("Stats: %+v", st)
	}
}

// TestMaxWaitTimer: a waiter nobody wakes is shed when its timer fires.
func TestMaxWaitTimer(t *testing.T) {
	ctx := context.Background()
	l, _ := newLimiter(t, Config{MinLimit: 1, MaxLimit: 1, MaxWait: time.Millisecond})
	l.Acquire(ctx, Critical)
	_, err := l.Acquire(ctx, Critical)
	if shedReason(t, err) != ReasonQueueTimeout {
		t.Fatalf("Acquire: %v", err)
	}
}

// TestQueueFull: a Default request arriving at a full queue is shed; a Critical one takes
// the place of the newest Default waiter.
func TestQueueFull(t *testing.T) {
	ctx := context.Background()
	l, _ := newLimiter(t, Config{MinLimit: 1, MaxLimit: 1, CriticalReserve: -1, MaxWait: time.Hour, MaxQueue: 2})
	start := waitQueued(l)
	held, _ := l.Acquire(ctx, Critical)
	first, second := start(ctx, Default), start(ctx, Default)
	if _, err := l.Acquire(ctx, Default); shedReason(t, err) != ReasonQueueFull {
		t.Fatalf("Default at a full queue: %v", err)
	}
	crit := start(ctx, Critical)
	if r := <-second; shedReason(t, r.err) != ReasonQueueFull {
		t.Fatalf("the newest Default waiter: %v", r.err)
	}
	crit2 := start(ctx, Critical)
	if r := <-first; shedReason(t, r.err) != ReasonQueueFull {
		t.Fatalf("the remaining Default waiter: %v", r.err)
	}
	if _, err := l.Acquire(ctx, Critical); shedReason(t, err) != ReasonQueueFull {
		t.Fatalf("Critical at a queue full of Critical waiters: %v", err)
	}
	held.Release()
	r := <-crit
	if r.err != nil {
		t.Fatalf("the first Critical waiter: %v", r.err)
	}
	r.p.Release()
	if r := <-crit2; r.err != nil {
		t.Fatalf("the second Critical waiter: %v", r.err)
	}
}

// TestWaitIsLongTermLatency: with MaxWait 0 a request waits DefaultWaitLatencies (4)
// times the long-term latency when it queues, and 1s before that is known.
func TestWaitIsLongTermLatency(t *testing.T) {
	ctx := context.Background()
	l, clk := newLimiter(t, Config{MinLimit: 1, MaxLimit: 1, CriticalReserve: -1, Window: time.Nanosecond, MinSamples: 1})
	if got := l.wait(); got != DefaultMaxWait {
		t.Fatalf("wait before any window: %v, want %v", got, DefaultMaxWait)
	}
	p, _ := l.Acquire(ctx, Critical)
	clk.advance(10 * time.Minute)
	p.Release() // closes the first window: the long-term latency is 10m
	if got := l.wait(); got != 40*time.Minute {
		t.Fatalf("wait: %v, want 40m", got)
	}
	start := waitQueued(l)
	held, _ := l.Acquire(ctx, Critical)
	out := start(ctx, Default)
	clk.advance(40*time.Minute - 1)
	l.Acquire(ctx, Sheddable)
	select {
	case r := <-out:
		t.Fatalf("shed before its wait: %+v", r)
	default:
	}
	clk.advance(1)
	l.Acquire(ctx, Sheddable)
	if r := <-out; shedReason(t, r.err) != ReasonQueueTimeout {
		t.Fatalf("after its wait: %v", r.err)
	}
	held.Drop()
}

// outcomes records Enqueue's outcomes in the order done is called.
type outcomes struct {
	got []acquired
}

func (o *outcomes) done(c Criticality) func(*Permit, error) {
	return func(p *Permit, err error) { o.got = append(o.got, acquired{c, p, err}) }
}

// take returns the outcomes recorded since the last take.
func (o *outcomes) take() []acquired {
	got := o.got
	o.got = nil
	return got
}

// TestEnqueue: Enqueue decides as Acquire does without blocking. An outcome decided at
// once is handed to done before Enqueue returns; a waiter's is handed over by the call
// that admits or sheds it: a Release (Critical first), cancel, or a call that reads the
// clock after its wait. No timer sheds it.
func TestEnqueue(t *testing.T) {
	l, clk := newLimiter(t, Config{MinLimit: 2, MaxLimit: 2, CriticalReserve: -1, MaxWait: time.Minute})
	var o outcomes
	l.Enqueue(Default, o.done(Default))
	l.Enqueue(Default, o.done(Default))
	held := o.take()
	if len(held) != 2 || held[0].err != nil || held[1].err != nil {
		t.Fatalf("two requests under a limit of 2: %+v", held)
	}
	l.Enqueue(Sheddable, o.done(Sheddable))
	if got := o.take(); len(got) != 1 || shedReason(t, got[0].err) != ReasonLimit {
		t.Fatalf("Sheddable at the limit: %+v, want shed at once", got)
	}
	l.Enqueue(Default, o.done(Default))
	cancelCrit := l.Enqueue(Critical, o.done(Critical))
	cancelLate := l.Enqueue(Default, o.done(Default))
	if got := o.take(); len(got) != 0 {
		t.Fatalf("waiters decided with nothing released: %+v", got)
	}
	if st := l.Stats(); st.Queued != 3 {
		t.Fatalf("Stats: %+v, want 3 queued", st)
	}

	held[0].p.Release()
	got := o.take()
	if len(got) != 1 || got[0].c != Critical || got[0].err != nil {
		t.Fatalf("after a Release: %+v, want the Critical waiter admitted", got)
	}
	cancelCrit(errors.New("ignored")) // decided already: nothing happens
	if got := o.take(); len(got) != 0 {
		t.Fatalf("cancel after the outcome: %+v", got)
	}
	gone := errors.New("client gone")
	cancelLate(gone)
	got = o.take()
	if len(got) != 1 || shedReason(t, got[0].err) != ReasonCanceled || !errors.Is(got[0].err, gone) {
		t.Fatalf("canceled waiter: %+v, want shed canceled wrapping its cause", got)
	}

	// The first Default waiter: no timer sheds it; a call reading the clock its wait
	// after it queued does.
	clk.advance(time.Minute - 1)
	l.Enqueue(Sheddable, o.done(Sheddable))
	if got := o.take(); len(got) != 1 || got[0].c != Sheddable {
		t.Fatalf("before the wait ended: %+v, want only the Sheddable request shed", got)
	}
	clk.advance(1)
	if got := o.take(); len(got) != 0 {
		t.Fatalf("decided with no call reading the clock: %+v", got)
	}
	held[1].p.Release()
	got = o.take()
	if len(got) != 1 || got[0].c != Default || shedReason(t, got[0].err) != ReasonQueueTimeout {
		t.Fatalf("after its wait, at a Release: %+v, want shed queue_timeout", got)
	}
	if st := l.Stats(); st != (Stats{Limit: 2, InFlight: 1}) {
		t.Errorf("Stats: %+v", st)
	}
}

// TestEnqueueBesideAcquire: requests of both kinds share one queue, in arrival order
// within a criticality, and a full queue sheds the newest Default waiter of either kind
// for a Critical arrival.
func TestEnqueueBesideAcquire(t *testing.T) {
	ctx := context.Background()
	l, _ := newLimiter(t, Config{MinLimit: 1, MaxLimit: 1, CriticalReserve: -1, MaxWait: time.Hour, MaxQueue: 2})
	start := waitQueued(l)
	held, _ := l.Acquire(ctx, Critical)
	var o outcomes
	l.Enqueue(Default, o.done(Default))
	blocked := start(ctx, Default)
	l.Enqueue(Critical, o.done(Critical)) // the queue is full: the newest Default (blocked) goes
	if r := <-blocked; shedReason(t, r.err) != ReasonQueueFull {
		t.Fatalf("the newest Default waiter: %v", r.err)
	}
	held.Release()
	got := o.take()
	if len(got) != 1 || got[0].c != Critical || got[0].err != nil {
		t.Fatalf("after a Release: %+v, want the Critical waiter admitted", got)
	}
	got[0].p.Drop()
	if got := o.take(); len(got) != 1 || got[0].c != Default || got[0].err != nil {
		t.Fatalf("after a Drop: %+v, want the Default waiter admitted", got)
	}
}
