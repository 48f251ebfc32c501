package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

type ctxKey struct{}

func TestSharedDeadlines(t *testing.T) {
	const d = 40 * time.Millisecond
	s := newSharedDeadlines(d)
	parent := context.WithValue(context.Background(), ctxKey{}, "v")

	start := time.Now()
	c1 := s.context(parent, start)
	at, ok := c1.Deadline()
	if !ok || at.After(start.Add(d)) || !at.After(start.Add(d-s.slack)) {
		t.Fatalf("deadline %v after start, want in (%v, %v]", at.Sub(start), d-s.slack, d)
	}
	if c1.Value(ctxKey{}) != "v" {
		t.Errorf("the caller's values are lost")
	}
	if c1.Err() != nil {
		t.Errorf("Err before the deadline: %v", c1.Err())
	}

	// A call starting within the slack shares the deadline; one starting later gets
	// its own. Neither ends later than its own deadline.
	c2 := s.context(parent, start.Add(s.slack/2))
	if at2, _ := c2.Deadline(); !at2.Equal(at) || c2.Done() != c1.Done() {
		t.Errorf("a call %v later got deadline %v, want the shared %v", s.slack/2, at2, at)
	}
	later := start.Add(s.slack)
	c3 := s.context(parent, later)
	if at3, _ := c3.Deadline(); at3.After(later.Add(d)) || !at3.After(later.Add(d-s.slack)) || c3.Done() == c1.Done() {
		t.Errorf("a call %v later got deadline %v after its start, want its own in (%v, %v]", s.slack, at3.Sub(later), d-s.slack, d)
	}
	// A call that started earlier than the current shared deadline allows (a caller
	// delayed between reading the clock and asking) never gets a later deadline.
	c4 := s.context(parent, start.Add(-s.slack))
	if at4, _ := c4.Deadline(); at4.After(start.Add(d - s.slack)) {
		t.Errorf("a call that started before gets deadline %v after its start, want at most %v", at4.Sub(start.Add(-s.slack)), d)
	}

	// context.AfterFunc and derived contexts follow the shared deadline.
	child, cancel := context.WithCancel(c1)
	defer cancel()
	fired := make(chan struct{})
	context.AfterFunc(c1, func() { close(fired) })
	stopped := context.AfterFunc(c1, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() {
		t.Error("stop of a pending AfterFunc returned false")
	}

	select {
	case <-c1.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after the deadline")
	}
	// The deadline is a runtime timer, which no clock injects; a lower bound only, which
	// load cannot break (it can only make Done later).
	if waited := time.Since(start); waited < d-s.slack {
		t.Errorf("Done closed after %v, before the deadline", waited)
	}
	if !errors.Is(c1.Err(), context.DeadlineExceeded) {
		t.Errorf("Err after the deadline: %v", c1.Err())
	}
	select {
	case <-fired:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc did not run")
	}
	<-child.Done()
	if !errors.Is(child.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(child), context.DeadlineExceeded) {
		t.Errorf("derived context: Err %v, Cause %v", child.Err(), context.Cause(child))
	}
	ran := make(chan struct{})
	context.AfterFunc(c1, func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc on an ended context did not run")
	}
}

// TestSharedDeadlinesParent: a caller whose own deadline comes first, or whose context
// has already ended, gets its own context, as context.WithTimeout would behave.
func TestSharedDeadlinesParent(t *testing.T) {
	s := newSharedDeadlines(time.Second)
	now := time.Now()
	sooner, cancel := context.WithDeadline(context.Background(), now.Add(time.Millisecond))
	defer cancel()
	if got := s.context(sooner, now); got != sooner {
		t.Errorf("a caller with a sooner deadline got %v", got)
	}
	ended, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if got := s.context(ended, now); got != ended {
		t.Errorf("an ended caller got %v", got)
	}
	later, cancel3 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel3()
	if got := s.context(later, now); got == later {
		t.Error("a caller with a later deadline got its own context")
	}
}

// TestInlineReport: an inline decision returns the Report of the failover decorator (the
// store was called, the breaker's state), and the store's context keeps the caller's
// values.
func TestInlineReport(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	faulty := &valueStore{faultyStore: newFaultyStore(t)}
	l := New(faulty, WithInlineCalls())
	defer l.Close()
	ds := make([]sluice.Decision, 1)
	rep, err := l.Decide(parent, []sluice.Request{{Key: "k", Limit: sluice.PerSecond(1), N: 1}}, ds)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.StoreCalled || rep.Breaker != store.BreakerClosed || rep.Failure != nil || rep.Kind != "" || !ds[0].Allowed {
		t.Errorf("report %+v, decision %+v", rep, ds[0])
	}
	if got := faulty.seen.Load(); got == nil || *got != "v" {
		t.Errorf("the store's context carried %v, want the caller's value", got)
	}
}

// valueStore records the value of ctxKey in the context of the last decision.
type valueStore struct {
	*faultyStore
	seen atomic.Pointer[string]
}

func (s *valueStore) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	if v, ok := ctx.Value(ctxKey{}).(string); ok {
		s.seen.Store(&v)
	}
	return s.faultyStore.Decide(ctx, reqs, ds)
}

// TestSharedDeadlineChunks: decisions whose contexts come from the same chunks (more
// than deadlineChunk of them, at once) each keep their own caller's values and their
// own deadline: a decision whose store call outlives the deadline fails over, and the
// others, in the same chunks and sharing its deadline, are decided by the store.
func TestSharedDeadlineChunks(t *testing.T) {
	const (
		decisions = 3*deadlineChunk + 5
		slowEvery = 10
		d         = 500 * time.Millisecond
	)
	faulty := &slowStore{Store: memory.New()}
	defer faulty.Store.Close()
	// A breaker that never opens: the slow calls' failures must not decide the others.
	l := New(faulty, WithInlineCalls(), WithDeadline(d), WithBreaker(Breaker{ConsecutiveFailures: 1 << 20, MinCalls: 1 << 20}))
	defer l.Close()
	limit := sluice.PerSecond(1000)

	type result struct {
		d     sluice.Decision
		err   error
		start time.Time
	}
	results := make([]result, decisions)
	var wg sync.WaitGroup
	for i := range decisions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("fast:", i)
			if i%slowEvery == 0 {
				key = fmt.Sprint("slow:", i)
			}
			ctx := context.WithValue(context.Background(), ctxKey{}, key)
			results[i].start = time.Now()
			results[i].d, results[i].err = sluice.AllowN(ctx, l, key, limit, 1)
		}()
	}
	wg.Wait()

	seen := map[context.Context]string{}
	faulty.mu.Lock()
	defer faulty.mu.Unlock()
	for i, r := range results {
		slow := i%slowEvery == 0
		key := fmt.Sprint("fast:", i)
		if slow {
			key = fmt.Sprint("slow:", i)
		}
		call, ok := faulty.calls[key]
		if !ok {
			t.Errorf("%s: the store was not called", key)
			continue
		}
		if other, dup := seen[call.ctx]; dup {
			t.Errorf("%s and %s were given the same context", key, other)
		}
		seen[call.ctx] = key
		if call.value != key {
			t.Errorf("%s: its store call carried the value %q, want its caller's", key, call.value)
		}
		if at, ok := call.ctx.Deadline(); !ok || at.After(call.began.Add(d)) || !at.After(r.start.Add(d-l.shared.slack)) {
			t.Errorf("%s: deadline %v after its decision started, want in (%v, %v]", key, at.Sub(r.start), d-l.shared.slack, d)
		}
		switch {
		case r.err != nil:
			t.Errorf("%s: %v", key, r.err)
		case slow && (r.d.Path != sluice.PathOpen || !errors.Is(call.err, context.DeadlineExceeded)):
			t.Errorf("%s, past its deadline: path %v (its call ended with %v), want %v", key, r.d.Path, call.err, sluice.PathOpen)
		case !slow && (r.d.Path != sluice.PathStore || !r.d.Allowed):
			t.Errorf("%s: %+v, want allowed by the store", key, r.d)
		}
	}
	if len(faulty.calls) != decisions {
		t.Errorf("%d store calls, want %d", len(faulty.calls), decisions)
	}
}

// slowStore is a memory store whose decisions on keys "slow:..." wait for their context
// to end; it records each decision's context.
type slowStore struct {
	*memory.Store
	mu    sync.Mutex
	calls map[string]storeCall
}

type storeCall struct {
	began time.Time
	ctx   context.Context
	value any // of ctxKey
	err   error
}

func (s *slowStore) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	call := storeCall{began: time.Now(), ctx: ctx, value: ctx.Value(ctxKey{})}
	var rep sluice.Report
	if strings.HasPrefix(reqs[0].Key, "slow:") {
		<-ctx.Done()
		call.err = ctx.Err()
	} else {
		rep, call.err = s.Store.Decide(ctx, reqs, ds)
	}
	s.mu.Lock()
	if s.calls == nil {
		s.calls = map[string]storeCall{}
	}
	s.calls[reqs[0].Key] = call
	s.mu.Unlock()
	return rep, call.err
}
