package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestCallCtx: a callCtx has no deadline, stays live while disarmed in time and is then
// reused, and once its timer fires it ends with context.Canceled, as do the contexts
// derived from it; through a store, a batch goroutine reuses its callCtx from call to
// call, and after a call whose callers' deadline passed it makes a new one.
func TestCallCtx(t *testing.T) {
	t.Run("alone", func(t *testing.T) {
		c := newCallCtx()
		if _, ok := c.Deadline(); ok {
			t.Error("a callCtx has a deadline")
		}
		for i := range 3 {
			c.timer.Reset(time.Hour)
			if !c.timer.Stop() || c.Err() != nil {
				t.Fatalf("call %d: disarmed before its deadline, the context is not live: %v", i, c.Err())
			}
		}
		child, cancel := context.WithCancel(c)
		defer cancel()
		c.timer.Reset(time.Millisecond)
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed 10s after the deadline")
		}
		if c.timer.Stop() {
			t.Error("disarm after the deadline reports the context live")
		}
		if err := c.Err(); err != context.Canceled {
			t.Errorf("Err after the deadline: %v, want context.Canceled", err)
		}
		if err := context.Cause(c); err != context.Canceled {
			t.Errorf("Cause after the deadline: %v, want context.Canceled", err)
		}
		<-child.Done()
		if !errors.Is(child.Err(), context.Canceled) {
			t.Errorf("derived context: %v, want context.Canceled", child.Err())
		}
	})

	t.Run("store", func(t *testing.T) {
		srv := redistest.Start(t)
		s := open(t, srv.URL())
		limit := sluice.PerSecond(1000)
		// idleCtx waits until the store's one batch goroutine is idle and returns its
		// callCtx.
		idleCtx := func() *callCtx {
			var cc *callCtx
			poll.Until(t, 10*time.Second, "an idle batch goroutine", func() bool {
				s.loopMu.Lock()
				defer s.loopMu.Unlock()
				if len(s.idle) != 1 {
					return false
				}
				cc = s.idle[0].bufs.ctx
				return true
			})
			return cc
		}
		// decide makes one decision with a deadline d away and returns the callCtx of
		// its batch goroutine, idle again.
		decide := func(key string, d time.Duration) (*callCtx, error) {
			_, err := s.AllowN(deadline(t, d), key, limit, 1)
			return idleCtx(), err
		}
		first, err := decide("a", time.Minute)
		if err != nil || first == nil {
			t.Fatalf("a decision with a deadline: %v; its batch goroutine's context %v", err, first)
		}
		for i := range 3 {
			cc, err := decide(fmt.Sprint("b", i), time.Minute)
			if err != nil || cc != first || first.Err() != nil {
				t.Fatalf("decision %d: %v; its context %p, want the first's %p, live (Err %v)", i, err, cc, first, first.Err())
			}
		}
		if n := s.loops.Load(); n != 1 {
			t.Errorf("%d batch goroutines started for one caller at a time, want 1", n)
		}

		// A paused server: the call's context ends at the deadline, as context.Canceled,
		// and is not reused.
		srv.Pause()
		_, err = s.AllowN(deadline(t, 50*time.Millisecond), "c", limit, 1)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("paused server: %v, want context.DeadlineExceeded", err)
		}
		select {
		case <-first.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the call's context did not end 10s after its deadline")
		}
		if err := first.Err(); err != context.Canceled {
			t.Errorf("the call's context after its deadline: %v, want context.Canceled", err)
		}
		if cc := idleCtx(); cc != nil {
			t.Errorf("after a call whose deadline passed, the batch goroutine kept a context (%p, Err %v)", cc, cc.Err())
		}
		srv.Resume()
		cc, err := decide("d", time.Minute)
		if err != nil || cc == nil || cc == first || cc.Err() != nil {
			t.Errorf("after a call whose deadline passed: %v; context %p, want a new live one (not %p)", err, cc, first)
		}
	})
}

// deadline returns a context that ends d from now, cancelled at the test's end.
func deadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestBatchLoops: a store's batch goroutines outlive their batches: one caller's
// sequential decisions reuse them; after a burst that ran many at once, at most
// maxIdleLoops stay, waiting; Close ends them all.
func TestBatchLoops(t *testing.T) {
	base := countLoops()
	srv := redistest.Start(t)
	s := open(t, srv.URL(), WithConcurrency(64), WithBatchSize(1))
	limit := sluice.PerSecond(1000)
	ctx := context.Background()

	const sequential = 100
	for i := range sequential {
		if _, err := s.AllowN(ctx, fmt.Sprint("seq", i), limit, 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.loops.Load(); n > sequential/10 {
		t.Errorf("%d batch goroutines started for %d sequential decisions, want them reused", n, sequential)
	}

	// A burst on a paused server: every call it starts waits, so many batch goroutines
	// run at once.
	srv.Pause()
	started := s.loops.Load()
	const callers = 64
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.AllowN(ctx, fmt.Sprint("burst", i), limit, 1); err != nil {
				t.Error(err)
			}
		}()
	}
	poll.Until(t, 10*time.Second, "more batch goroutines than may stay idle", func() bool {
		return countLoops()-base > maxIdleLoops
	})
	srv.Resume()
	wg.Wait()
	t.Logf("%d batch goroutines started for the burst", s.loops.Load()-started)
	poll.Until(t, 10*time.Second, "the burst's batch goroutines to end or go idle", func() bool {
		s.loopMu.Lock()
		idle := len(s.idle)
		s.loopMu.Unlock()
		return idle == maxIdleLoops && countLoops()-base == maxIdleLoops
	})

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "Close to end the batch goroutines", func() bool { return countLoops() == base })
	if _, err := s.AllowN(ctx, "closed", limit, 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("after Close: %v, want sluice.ErrClosed", err)
	}
}

// countLoops counts the goroutines in Store.loop, the batch goroutines of every store.
func countLoops() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Count(string(buf), "redisstore.(*Store).loop(")
}
