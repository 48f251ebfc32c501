package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// slack is the scheduling delay a decision may add to its deadline in these tests. It is
// generous: the tests run under the race detector on two busy cores; what it rules out
// is waiting for the store (faults last seconds).
const slack = 750 * time.Millisecond

// faultyStore is a memory store that can be made to fail or hang on command, standing in
// for a store whose client ignores its context. The Redis fault tests (fault_test.go) use
// real servers; this one pins down the decorator's own rules.
type faultyStore struct {
	*memory.Store
	fail  atomic.Pointer[error]
	hang  atomic.Pointer[chan struct{}] // when set, calls block until it is closed, ignoring ctx
	calls atomic.Int64
}

func newFaultyStore(t *testing.T) *faultyStore {
	s := &faultyStore{Store: memory.New()}
	t.Cleanup(func() { s.Store.Close() })
	return s
}

func (s *faultyStore) setFail(err error) {
	if err == nil {
		s.fail.Store(nil)
		return
	}
	s.fail.Store(&err)
}

// setHang makes calls block until the returned function is called.
func (s *faultyStore) setHang() (release func()) {
	ch := make(chan struct{})
	s.hang.Store(&ch)
	return func() { s.hang.Store(nil); close(ch) }
}

func (s *faultyStore) before() error {
	s.calls.Add(1)
	if ch := s.hang.Load(); ch != nil {
		<-*ch
	}
	if err := s.fail.Load(); err != nil {
		return *err
	}
	return nil
}

func (s *faultyStore) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Decision, error) {
	if err := s.before(); err != nil {
		return sluice.Decision{}, err
	}
	return s.Store.AllowN(ctx, key, limit, n)
}

func (s *faultyStore) AllowMulti(ctx context.Context, reqs []sluice.Request) ([]sluice.Decision, error) {
	if err := s.before(); err != nil {
		return nil, err
	}
	return sluice.AllowMulti(ctx, s.Store, reqs)
}

func (s *faultyStore) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	if err := s.before(); err != nil {
		return err
	}
	return s.Store.Reset(ctx, key, limit)
}

// redisReply is an error shaped like a Redis client's error reply (its message is the
// reply, code first), wrapped the way a store wraps it.
type redisReply string

func (e redisReply) Error() string { return string(e) }

func storeErr(reply string) error { return fmt.Errorf("redisstore: decide: %w", redisReply(reply)) }

func newLimiter(t *testing.T, primary sluice.Limiter, opts ...Option) *Limiter {
	t.Helper()
	// A deadline no healthy call misses on a busy machine, unless the test sets its own.
	l := New(primary, append([]Option{WithDeadline(time.Second)}, opts...)...)
	t.Cleanup(func() { l.Close() })
	return l
}

func TestClassify(t *testing.T) {
	refused := func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			t.Fatal("dial to a closed port succeeded")
		}
		return fmt.Errorf("redisstore: decide: %w", err)
	}()
	tests := []struct {
		err  error
		want Kind
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", sluice.ErrInvalidLimit), KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrCostExceedsLimit), KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrInvalidKey), KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrNotAtomic), KindNotAtomic},
		{fmt.Errorf("x: %w", sluice.ErrClosed), KindClosed},
		{fmt.Errorf("x: %w", context.Canceled), KindCanceled},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), KindTimeout},
		{fmt.Errorf("x: %w", os.ErrDeadlineExceeded), KindTimeout},
		{ErrDeadline, KindTimeout},
		{fmt.Errorf("%w: %w", ErrBreakerOpen, errors.New("circuit breaker is open")), KindBreakerOpen},
		{ErrOverload, KindOverload},
		{refused, KindRefused},
		{fmt.Errorf("x: %w", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), KindReset},
		{fmt.Errorf("x: %w", syscall.EPIPE), KindReset},
		{fmt.Errorf("x: %w", io.EOF), KindReset},
		{fmt.Errorf("x: %w", io.ErrUnexpectedEOF), KindReset},
		{errors.New("rueidis client is closing or unable to connect redis"), KindRefused},
		{storeErr("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), KindBusy},
		{storeErr("OOM command not allowed when used memory > 'maxmemory'."), KindOOM},
		{storeErr("LOADING Redis is loading the dataset in memory"), KindLoading},
		{storeErr("READONLY You can't write against a read only replica."), KindReadOnly},
		{storeErr("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), KindReadOnly},
		{storeErr("CLUSTERDOWN The cluster is down"), KindClusterDown},
		{storeErr("MOVED 3999 127.0.0.1:6381"), KindRedirect},
		{storeErr("ASK 3999 127.0.0.1:6381"), KindRedirect},
		{storeErr("TRYAGAIN Multiple keys request during rehashing of slot"), KindRedirect},
		{storeErr("NOSCRIPT No matching script. Please use EVAL."), KindNoScript},
		// The reply formatted into a message rather than wrapped.
		{fmt.Errorf("redisstore: decide: %v", "OOM command not allowed"), KindOOM},
		// A reply that wraps a timeout is still the reply.
		{errors.Join(redisReply("LOADING loading"), context.DeadlineExceeded), KindLoading},
		{storeErr("ERR Error running script (call to f_x): @user_script:1: bad argument"), KindOther},
		// A word that merely starts like a code is not one.
		{storeErr("BUSYGROUP Consumer Group name already exists"), KindOther},
	}
	for _, tt := range tests {
		name := "nil"
		if tt.err != nil {
			name = tt.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %q, want %q", tt.err, got, tt.want)
			}
			failure := tt.want.IsFailure()
			switch tt.want {
			case "", KindBadInput, KindNotAtomic, KindCanceled, KindClosed:
				if failure {
					t.Errorf("%q.IsFailure() = true", tt.want)
				}
			default:
				if !failure {
					t.Errorf("%q.IsFailure() = false", tt.want)
				}
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in   string
		want Mode
		err  bool
	}{
		{"open", FailOpen, false}, {"OPEN", FailOpen, false}, {"fail_open", FailOpen, false},
		{"closed", FailClosed, false}, {"fail-closed", FailClosed, false},
		{"local", FailLocal, false}, {" local ", FailLocal, false},
		{"", Unset, false}, {"allow", Unset, true}, {"deny", Unset, true},
	}
	for _, tt := range tests {
		got, err := ParseMode(tt.in)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("ParseMode(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err == nil && tt.want != Unset {
			var m Mode
			b, _ := tt.want.MarshalText()
			if err := m.UnmarshalText(b); err != nil || m != tt.want {
				t.Errorf("round trip of %v: %v, %v", tt.want, m, err)
			}
		}
	}
}

func TestShareOf(t *testing.T) {
	tests := []struct {
		limit sluice.Limit
		share float64
		want  sluice.Limit
	}{
		{sluice.PerSecond(100), 1, sluice.PerSecond(100)},
		{sluice.PerSecond(100), 0, sluice.PerSecond(100)},
		{sluice.PerSecond(100), 1.5, sluice.PerSecond(100)},
		{sluice.PerSecond(100), 0.25, sluice.PerSecond(25)},
		{sluice.PerSecond(100), 1.0 / 3, sluice.PerSecond(33)},
		{sluice.PerSecond(2), 0.1, sluice.PerSecond(1)}, // never below 1
		{sluice.PerMinute(60).WithBurst(10), 0.5, sluice.PerMinute(30).WithBurst(5)},
		{sluice.PerMinute(60).WithBurst(1), 0.5, sluice.PerMinute(30).WithBurst(1)},
		{sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 1000, Period: time.Hour}, 0.1,
			sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: 100, Period: time.Hour}},
	}
	for _, tt := range tests {
		got := ShareOf(tt.limit, tt.share)
		if got != tt.want {
			t.Errorf("ShareOf(%v, %v) = %v, want %v", tt.limit, tt.share, got, tt.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("ShareOf(%v, %v) is invalid: %v", tt.limit, tt.share, err)
		}
	}
}

// TestModes checks what each mode decides when the store fails, and which rule picks the
// mode and the share.
func TestModes(t *testing.T) {
	limit := sluice.PerMinute(10)
	down := storeErr("LOADING Redis is loading the dataset in memory")
	tests := []struct {
		name     string
		opts     []Option
		ctx      func(context.Context) context.Context
		wantPath sluice.Path
		wantRate int64 // for the local path
	}{
		{name: "default is open", wantPath: sluice.PathOpen},
		{name: "default mode closed", opts: []Option{WithDefaultMode(FailClosed)}, wantPath: sluice.PathClosed},
		{name: "default mode local, whole limit", opts: []Option{WithDefaultMode(FailLocal)}, wantPath: sluice.PathLocal, wantRate: 10},
		{name: "default local share", opts: []Option{WithDefaultMode(FailLocal), WithLocalShare(0.5)}, wantPath: sluice.PathLocal, wantRate: 5},
		{
			name: "func overrides default",
			opts: []Option{WithDefaultMode(FailOpen), WithFallbackFunc(func(_ context.Context, key string, _ sluice.Limit) Fallback {
				return Fallback{Mode: FailLocal, Share: 0.2}
			})},
			wantPath: sluice.PathLocal, wantRate: 2,
		},
		{
			name: "context overrides func",
			opts: []Option{WithFallbackFunc(func(context.Context, string, sluice.Limit) Fallback { return Fallback{Mode: FailOpen} })},
			ctx: func(ctx context.Context) context.Context {
				return WithFallback(ctx, Fallback{Mode: FailClosed})
			},
			wantPath: sluice.PathClosed,
		},
		{
			name: "context mode, func share",
			opts: []Option{WithFallbackFunc(func(context.Context, string, sluice.Limit) Fallback { return Fallback{Mode: FailOpen, Share: 0.3} })},
			ctx: func(ctx context.Context) context.Context {
				return WithFallback(ctx, Fallback{Mode: FailLocal})
			},
			wantPath: sluice.PathLocal, wantRate: 3,
		},
		{
			name: "context share out of range defers",
			opts: []Option{WithLocalShare(0.5)},
			ctx: func(ctx context.Context) context.Context {
				return WithFallback(ctx, Fallback{Mode: FailLocal, Share: 7})
			},
			wantPath: sluice.PathLocal, wantRate: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := newFaultyStore(t)
			store.setFail(down)
			// A breaker that never opens, so that every call reaches the store.
			l := newLimiter(t, store, append(tt.opts, WithDeadline(time.Second),
				WithBreaker(Breaker{ConsecutiveFailures: 1 << 30, MinCalls: 1 << 30}))...)
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx(ctx)
			}
			allowed := 0
			for i := 0; i < 12; i++ {
				var rep Report
				d, err := l.AllowN(WithReport(ctx, &rep), "k", limit, 1)
				if d.Path != tt.wantPath {
					t.Fatalf("call %d: path %v, want %v", i, d.Path, tt.wantPath)
				}
				if rep.Kind != KindLoading || !errors.Is(rep.Cause, down) || !rep.Called {
					t.Errorf("call %d: report %+v, want the LOADING cause", i, rep)
				}
				switch tt.wantPath {
				case sluice.PathOpen:
					if err != nil || !d.Allowed || d.Limit != limit {
						t.Fatalf("open: %+v, %v", d, err)
					}
				case sluice.PathClosed:
					if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, down) || d.Allowed {
						t.Fatalf("closed: %+v, %v; want a denial wrapping ErrStoreUnavailable and the cause", d, err)
					}
					if d.RetryAfter != time.Second {
						t.Errorf("closed: RetryAfter %v, want the breaker's OpenFor", d.RetryAfter)
					}
				case sluice.PathLocal:
					if err != nil {
						t.Fatal(err)
					}
					if d.Limit.Rate != tt.wantRate {
						t.Fatalf("local limit %v, want rate %d", d.Limit, tt.wantRate)
					}
					if d.Allowed {
						allowed++
					}
				}
			}
			if tt.wantPath == sluice.PathLocal && allowed != int(tt.wantRate) {
				t.Errorf("local allowed %d of 12, want exactly the share %d", allowed, tt.wantRate)
			}
		})
	}
}

func TestBadInputIsNeverFailedOpen(t *testing.T) {
	store := newFaultyStore(t)
	l := newLimiter(t, store, WithDefaultMode(FailOpen), WithBreaker(Breaker{ConsecutiveFailures: 1}))
	ctx := context.Background()
	bad := []struct {
		key   string
		limit sluice.Limit
		n     int64
	}{
		{"", sluice.PerSecond(1), 1},
		{"k", sluice.Limit{}, 1},
		{"k", sluice.PerSecond(1), -1},
		{"k", sluice.PerSecond(1), 2},
	}
	for _, b := range bad {
		d, err := l.AllowN(ctx, b.key, b.limit, b.n)
		if !sluice.IsBadInput(err) || d.Allowed {
			t.Errorf("AllowN(%q, %v, %d) = %+v, %v; want bad input", b.key, b.limit, b.n, d, err)
		}
	}
	// Bad input detected by the store itself (a duplicate in a batch) is returned as is
	// and does not trip a breaker that opens on the first failure.
	reqs := []sluice.Request{{Key: "k", Limit: sluice.PerSecond(5), N: 1}, {Key: "k", Limit: sluice.PerSecond(5), N: 1}}
	for i := 0; i < 3; i++ {
		if _, err := sluice.AllowMulti(ctx, l, reqs); !sluice.IsBadInput(err) {
			t.Fatalf("duplicate batch: %v, want bad input", err)
		}
	}
	store.setFail(fmt.Errorf("store says: %w", sluice.ErrInvalidLimit))
	for i := 0; i < 3; i++ {
		if _, err := l.AllowN(ctx, "k", sluice.PerSecond(5), 1); !sluice.IsBadInput(err) {
			t.Fatalf("store bad input: %v", err)
		}
	}
	if s := l.State(); s != BreakerClosed {
		t.Errorf("breaker %v after bad input, want closed", s)
	}
	if store.calls.Load() == 0 {
		t.Error("the store was never called")
	}
}

// TestDeadlineWithStoreIgnoringContext: a store that hangs regardless of its context
// still releases every caller at the deadline, and the goroutines left running end when
// the store returns.
func TestDeadlineWithStoreIgnoringContext(t *testing.T) {
	const deadline = 20 * time.Millisecond
	store := newFaultyStore(t)
	l := newLimiter(t, store, WithDeadline(deadline), WithDefaultMode(FailClosed),
		WithBreaker(Breaker{ConsecutiveFailures: 1 << 30, MinCalls: 1 << 30}), WithMaxPending(40))
	release := store.setHang()
	before := runtime.NumGoroutine()

	var wg sync.WaitGroup
	var worst atomic.Int64
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				var rep Report
				start := time.Now()
				d, err := l.AllowN(WithReport(context.Background(), &rep), fmt.Sprint("k", g), sluice.PerSecond(10), 1)
				took := time.Since(start)
				if int64(took) > worst.Load() {
					worst.Store(int64(took))
				}
				if d.Path != sluice.PathClosed || !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("hanging store: %+v, %v; want closed", d, err)
				}
				if rep.Kind != KindTimeout && rep.Kind != KindOverload {
					t.Errorf("kind %q, want timeout or overload", rep.Kind)
				}
			}
		}()
	}
	wg.Wait()
	if w := time.Duration(worst.Load()); w > deadline+slack {
		t.Errorf("slowest decision took %v with a %v deadline", w, deadline)
	}
	// At most WithMaxPending calls were left running; the rest were not started.
	if n := store.calls.Load(); n > 40 {
		t.Errorf("%d store calls started, want at most the 40 pending allowed", n)
	}
	if extra := runtime.NumGoroutine() - before; extra > 45 {
		t.Errorf("%d goroutines more than before, want at most ~40 pending calls", extra)
	}
	release()
	if err := l.Close(); err != nil { // waits for the pending calls
		t.Fatal(err)
	}
	if n := l.pending.Load(); n != 0 {
		t.Errorf("%d calls still counted as pending after they returned", n)
	}
	if _, err := l.AllowN(context.Background(), "k", sluice.PerSecond(10), 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// TestBreakerCycle: consecutive failures open the breaker, which stops calling the store;
// after OpenFor it probes, a failed probe opens it again, and successful probes close it.
func TestBreakerCycle(t *testing.T) {
	store := newFaultyStore(t)
	var mu sync.Mutex
	var changes []string
	openFor := 100 * time.Millisecond
	l := newLimiter(t, store, WithBreaker(Breaker{ConsecutiveFailures: 3, FailingFor: -1, OpenFor: openFor, Probes: 2}),
		WithStateChange(func(from, to BreakerState) {
			mu.Lock()
			changes = append(changes, from.String()+">"+to.String())
			mu.Unlock()
		}))
	ctx := context.Background()
	limit := sluice.PerSecond(1000)
	decide := func() (sluice.Decision, Report) {
		var rep Report
		d, err := l.AllowN(WithReport(ctx, &rep), "k", limit, 1)
		if err != nil {
			t.Fatal(err)
		}
		return d, rep
	}

	store.setFail(storeErr("BUSY Redis is busy running a script."))
	for i := 0; i < 3; i++ {
		if d, _ := decide(); d.Path != sluice.PathOpen {
			t.Fatalf("failure %d: path %v", i, d.Path)
		}
	}
	if s := l.State(); s != BreakerOpen {
		t.Fatalf("after 3 failures: %v, want open", s)
	}
	calls := store.calls.Load()
	d, rep := decide()
	if d.Path != sluice.PathOpen || rep.Called || rep.Kind != KindBreakerOpen || rep.Breaker != BreakerOpen {
		t.Fatalf("open breaker: %+v %+v", d, rep)
	}
	if store.calls.Load() != calls {
		t.Fatal("the store was called while the breaker was open")
	}

	time.Sleep(openFor + 20*time.Millisecond)
	if s := l.State(); s != BreakerHalfOpen {
		t.Fatalf("after OpenFor: %v, want half-open", s)
	}
	if _, rep := decide(); !rep.Called || rep.Breaker != BreakerOpen { // the probe fails
		t.Fatalf("failed probe: %+v", rep)
	}

	time.Sleep(openFor + 20*time.Millisecond)
	store.setFail(nil)
	for i := 0; i < 2; i++ {
		if d, _ := decide(); d.Path != sluice.PathStore {
			t.Fatalf("probe %d: path %v", i, d.Path)
		}
	}
	if s := l.State(); s != BreakerClosed {
		t.Fatalf("after 2 good probes: %v, want closed", s)
	}
	mu.Lock()
	got := fmt.Sprint(changes)
	mu.Unlock()
	want := "[closed>open open>half_open half_open>open open>half_open half_open>closed]"
	if got != want {
		t.Errorf("state changes %s, want %s", got, want)
	}
}

func TestBreakerFailureRatio(t *testing.T) {
	store := newFaultyStore(t)
	l := newLimiter(t, store, WithBreaker(Breaker{ConsecutiveFailures: 100, FailingFor: -1, FailureRatio: 0.5, MinCalls: 10}))
	ctx := context.Background()
	limit := sluice.PerSecond(1000)
	for i := 0; i < 9; i++ { // alternate: never two failures in a row
		if i%2 == 0 {
			store.setFail(storeErr("READONLY You can't write against a read only replica."))
		} else {
			store.setFail(nil)
		}
		l.AllowN(ctx, "k", limit, 1)
		if s := l.State(); s != BreakerClosed {
			t.Fatalf("call %d: %v before MinCalls", i, s)
		}
	}
	store.setFail(nil)
	l.AllowN(ctx, "k", limit, 1) // 10 calls, 5 failures: ratio 0.5 is reached on the next failure
	if s := l.State(); s != BreakerClosed {
		t.Fatalf("ratio reached on a success: %v (the breaker trips on failures)", s)
	}
	store.setFail(storeErr("READONLY You can't write against a read only replica."))
	l.AllowN(ctx, "k", limit, 1)
	if s := l.State(); s != BreakerOpen {
		t.Fatalf("6 failures in 11 calls: %v, want open", s)
	}
}

func TestCallerCancellationIsNotAStoreFailure(t *testing.T) {
	store := newFaultyStore(t)
	l := newLimiter(t, store, WithDeadline(time.Second), WithDefaultMode(FailOpen), WithBreaker(Breaker{ConsecutiveFailures: 1}))
	release := store.setHang()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var rep Report
	d, err := l.AllowN(WithReport(ctx, &rep), "k", sluice.PerSecond(1), 1)
	if !errors.Is(err, context.DeadlineExceeded) || d.Allowed || d.Path != sluice.PathStore {
		t.Errorf("caller deadline: %+v, %v; want the caller's context error, not a fallback", d, err)
	}
	if rep.Kind != KindTimeout || rep.Cause != nil {
		t.Errorf("report %+v", rep)
	}
	release()
	if s := l.State(); s != BreakerClosed {
		t.Errorf("breaker %v after the caller's own deadline", s)
	}
}

func TestAllowMulti(t *testing.T) {
	ctx := context.Background()
	reqs := []sluice.Request{
		{Key: "a", Limit: sluice.PerMinute(10), N: 1},
		{Key: "a", Limit: sluice.PerHour(100), N: 1},
	}
	t.Run("store", func(t *testing.T) {
		l := newLimiter(t, newFaultyStore(t))
		ds, err := sluice.AllowMulti(ctx, l, reqs)
		if err != nil || len(ds) != 2 || !ds[0].Allowed || ds[1].Remaining != 99 || ds[0].Path != sluice.PathStore {
			t.Fatalf("%+v, %v", ds, err)
		}
	})
	t.Run("not atomic without a MultiLimiter primary", func(t *testing.T) {
		l := newLimiter(t, struct{ sluice.Limiter }{memoryStore(t)})
		if _, err := sluice.AllowMulti(ctx, l, reqs); !errors.Is(err, sluice.ErrNotAtomic) {
			t.Fatalf("%v, want ErrNotAtomic", err)
		}
	})
	modes := func(m0, m1 Mode) Option {
		return WithFallbackFunc(func(_ context.Context, _ string, limit sluice.Limit) Fallback {
			if limit.Period == time.Minute {
				return Fallback{Mode: m0, Share: 0.5}
			}
			return Fallback{Mode: m1, Share: 0.5}
		})
	}
	tests := []struct {
		name     string
		m0, m1   Mode
		wantPath sluice.Path
	}{
		{"open+open", FailOpen, FailOpen, sluice.PathOpen},
		{"open+local", FailOpen, FailLocal, sluice.PathLocal},
		{"local+closed", FailLocal, FailClosed, sluice.PathClosed},
	}
	for _, tt := range tests {
		t.Run("strictest mode "+tt.name, func(t *testing.T) {
			store := newFaultyStore(t)
			store.setFail(storeErr("CLUSTERDOWN The cluster is down"))
			l := newLimiter(t, store, modes(tt.m0, tt.m1))
			allowed := 0
			for i := 0; i < 8; i++ {
				ds, err := sluice.AllowMulti(ctx, l, reqs)
				if tt.wantPath == sluice.PathClosed {
					if !errors.Is(err, sluice.ErrStoreUnavailable) {
						t.Fatalf("closed: %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					if d.Path != tt.wantPath {
						t.Fatalf("path %v, want %v", d.Path, tt.wantPath)
					}
				}
				if ds[0].Allowed {
					allowed++
				}
				if ds[0].Allowed != ds[1].Allowed {
					t.Fatalf("batch split: %+v", ds)
				}
			}
			want := map[sluice.Path]int{sluice.PathOpen: 8, sluice.PathLocal: 5, sluice.PathClosed: 0}[tt.wantPath]
			if allowed != want {
				t.Errorf("%d of 8 batches allowed, want %d", allowed, want)
			}
		})
	}
}

func memoryStore(t *testing.T) *memory.Store {
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	return s
}

func TestLocalCostAboveShare(t *testing.T) {
	store := newFaultyStore(t)
	store.setFail(storeErr("OOM command not allowed when used memory > 'maxmemory'."))
	l := newLimiter(t, store, WithDefaultMode(FailLocal), WithLocalShare(0.25))
	d, err := l.AllowN(context.Background(), "k", sluice.PerSecond(8), 4) // share allows 2
	if err != nil || d.Allowed || d.Path != sluice.PathLocal || d.Limit.Rate != 2 || d.RetryAfter <= 0 {
		t.Errorf("%+v, %v; want a local denial with a RetryAfter", d, err)
	}
}

func TestReset(t *testing.T) {
	store := newFaultyStore(t)
	l := newLimiter(t, store, WithDefaultMode(FailLocal))
	ctx := context.Background()
	limit := sluice.PerMinute(1)
	if d, _ := l.AllowN(ctx, "k", limit, 1); !d.Allowed {
		t.Fatal("first call denied")
	}
	if err := l.Reset(ctx, "k", limit); err != nil {
		t.Fatal(err)
	}
	if d, _ := l.AllowN(ctx, "k", limit, 1); !d.Allowed {
		t.Fatal("denied after Reset")
	}
	store.setFail(storeErr("LOADING Redis is loading the dataset in memory"))
	if err := l.Reset(ctx, "k", limit); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("Reset on a failing store: %v, want ErrStoreUnavailable", err)
	}
	if err := l.Reset(ctx, "", limit); !sluice.IsBadInput(err) {
		t.Fatalf("Reset with an empty key: %v", err)
	}
}

// TestBreakerFailingFor: a burst of simultaneous failures (one slow coalesced store call
// failing every decision it carried) does not open the breaker; failures that go on for
// FailingFor do.
func TestBreakerFailingFor(t *testing.T) {
	store := newFaultyStore(t)
	l := newLimiter(t, store, WithBreaker(Breaker{ConsecutiveFailures: 5, FailingFor: 100 * time.Millisecond}))
	ctx := context.Background()
	limit := sluice.PerSecond(1000)
	store.setFail(storeErr("BUSY Redis is busy running a script."))
	start := time.Now()
	for i := 0; i < 50; i++ {
		l.AllowN(ctx, "k", limit, 1)
	}
	if time.Since(start) < 100*time.Millisecond {
		if s := l.State(); s != BreakerClosed {
			t.Fatalf("a burst of 50 failures within %v opened the breaker", time.Since(start))
		}
	}
	time.Sleep(100 * time.Millisecond)
	l.AllowN(ctx, "k", limit, 1)
	if s := l.State(); s != BreakerOpen {
		t.Fatalf("failures for 100ms: breaker %v, want open", s)
	}
}
