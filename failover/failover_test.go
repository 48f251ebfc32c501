package failover

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/region"
	"github.com/sluicehq/sluice/store"
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

func (s *faultyStore) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	if err := s.before(); err != nil {
		return sluice.Report{StoreCalled: true, Kind: sluice.KindOf(err)}, err
	}
	return s.Store.Decide(ctx, reqs, ds)
}

func (s *faultyStore) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	if err := s.before(); err != nil {
		return sluice.Reservation{}, err
	}
	return s.Store.Reserve(ctx, key, limit, n)
}

func (s *faultyStore) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	if err := s.before(); err != nil {
		return err
	}
	return s.Store.Reset(ctx, key, limit)
}

func (s *faultyStore) Release(ctx context.Context, key string, limit sluice.Limit, lease sluice.LeaseID) (bool, error) {
	if err := s.before(); err != nil {
		return false, err
	}
	return s.Store.Release(ctx, key, limit, lease)
}

func (s *faultyStore) Settle(ctx context.Context, key string, limit sluice.Limit, res sluice.ReservationID, cost int64) (sluice.Decision, error) {
	if err := s.before(); err != nil {
		return sluice.Decision{}, err
	}
	return s.Store.Settle(ctx, key, limit, res, cost)
}

// redisReply is an error shaped like a Redis client's error reply (its message is the
// reply, code first).
type redisReply string

func (e redisReply) Error() string { return string(e) }

// storeErr is a Redis error reply as a store returns it: wrapped with what failed, and
// classified by the store itself (a *sluice.StoreError of kind k), as the Redis store
// does. failover knows no store's error codes: it reads the kind with sluice.KindOf.
func storeErr(k sluice.ErrorKind, reply string) error {
	return &sluice.StoreError{Kind: k, Err: fmt.Errorf("redisstore: decide: %w", redisReply(reply))}
}

func newLimiter(t *testing.T, primary sluice.Limiter, opts ...Option) *Limiter {
	t.Helper()
	// A deadline no healthy call misses on a busy machine, unless the test sets its own.
	l := New(primary, append([]Option{WithDeadline(time.Second)}, opts...)...)
	t.Cleanup(func() { l.Close() })
	return l
}

// decideOne decides one request with l and returns its decision and the Report.
func decideOne(ctx context.Context, l sluice.Limiter, r sluice.Request) (sluice.Decision, sluice.Report, error) {
	var ds [1]sluice.Decision
	rep, err := l.Decide(ctx, []sluice.Request{r}, ds[:])
	return ds[0], rep, err
}

// TestKinds: the causes failover records for decisions it makes without the store's
// answer, and the errors it passes through, are classified by sluice.KindOf. (How a
// store classifies its own failures is the store's test: redisstore's classify_test.go.)
func TestKinds(t *testing.T) {
	tests := []struct {
		err  error
		want sluice.ErrorKind
	}{
		// failover's own causes (sluice.KindOf itself is tested in package sluice).
		{deadlineError(time.Second, nil), store.KindTimeout},
		{deadlineError(time.Second, context.DeadlineExceeded), store.KindTimeout},
		{fmt.Errorf("%w: %w", errBreakerOpen, errors.New("circuit breaker is open")), store.KindBreakerOpen},
		{errOverload, store.KindOverload},
		// A store's own classification passes through, however it is wrapped.
		{storeErr(store.KindLoading, "LOADING Redis is loading the dataset in memory"), store.KindLoading},
		{fmt.Errorf("x: %w", storeErr(store.KindBusy, "BUSY Redis is busy running a script.")), store.KindBusy},
		// An error no store classified is a failure all the same.
		{errors.New("something broke"), store.KindOther},
	}
	for _, tt := range tests {
		name := "nil"
		if tt.err != nil {
			name = tt.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			if got := sluice.KindOf(tt.err); got != tt.want {
				t.Errorf("KindOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
	// The causes still match failover's sentinels.
	if !errors.Is(deadlineError(time.Second, nil), ErrDeadline) || !errors.Is(errBreakerOpen, ErrBreakerOpen) || !errors.Is(errOverload, ErrOverload) {
		t.Error("a cause does not wrap its sentinel")
	}
}

func TestParseMode(t *testing.T) {
	tests := []struct {
		in   string
		want sluice.FailureMode
		err  bool
	}{
		{"open", sluice.FailOpen, false}, {"OPEN", sluice.FailOpen, false}, {"fail_open", sluice.FailOpen, false},
		{"closed", sluice.FailClosed, false}, {"fail-closed", sluice.FailClosed, false},
		{"local", sluice.FailLocal, false}, {" local ", sluice.FailLocal, false},
		{"", sluice.FailInherit, false}, {"allow", sluice.FailInherit, true}, {"deny", sluice.FailInherit, true},
	}
	for _, tt := range tests {
		got, err := sluice.ParseFailureMode(tt.in)
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.err)
		}
		if err == nil && tt.want != sluice.FailInherit {
			if m, err := sluice.ParseFailureMode(tt.want.String()); err != nil || m != tt.want {
				t.Errorf("round trip of %v: %v, %v", tt.want, m, err)
			}
		}
	}
}

// pathOf is the Path of a decision made in failure mode m.
func pathOf(m sluice.FailureMode) sluice.Path {
	switch m {
	case sluice.FailOpen:
		return sluice.PathOpen
	case sluice.FailClosed:
		return sluice.PathClosed
	case sluice.FailLocal:
		return sluice.PathLocal
	}
	return sluice.PathStore
}

// TestLocalShareIsRegionShare: a node's share of a limit while the store is down is the
// limit a region's share of the same fraction applies: one rounding (29% of 100 is 29).
func TestLocalShareIsRegionShare(t *testing.T) {
	limits := []sluice.Limit{sluice.PerSecond(100), sluice.PerMinute(60).WithBurst(10), sluice.PerSecond(3),
		{Algorithm: sluice.SlidingWindow, Rate: 1000, Period: time.Hour}}
	for _, f := range []float64{0.29, 0.57, 1.0 / 3, 0.1, 0.5, 1} {
		faulty := newFaultyStore(t)
		faulty.setFail(storeErr(store.KindOOM, "OOM command not allowed when used memory > 'maxmemory'."))
		l := newLimiter(t, faulty, WithDefault(sluice.Failure{Mode: sluice.FailLocal, Share: f}), WithLocalLimiter(memoryStore(t)))
		rs, err := region.NewShare(memoryStore(t), f)
		if err != nil {
			t.Fatal(err)
		}
		for _, lim := range limits {
			d, err := l.AllowN(context.Background(), "k", lim, 1)
			if err != nil || d.Path != sluice.PathLocal {
				t.Fatalf("share %v of %v: %+v, %v; want a local decision", f, lim, d, err)
			}
			if want := rs.Limit(lim); d.Limit.Rate != want.Rate || store.EffectiveBurst(d.Limit) != store.EffectiveBurst(want) {
				t.Errorf("share %v of %v: failover applies %v, a region %v", f, lim, d.Limit, want)
			}
		}
	}
}

// TestModes checks what each mode decides when the store fails, and which rule picks the
// mode and the share: the request's Failure, then the limiter's default.
func TestModes(t *testing.T) {
	limit := sluice.PerMinute(10)
	down := storeErr(store.KindLoading, "LOADING Redis is loading the dataset in memory")
	tests := []struct {
		name      string
		opts      []Option
		failure   sluice.Failure // the request's
		wantPath  sluice.Path
		wantRate  int64   // for the local path
		wantShare float64 // the Report's Fallback.Share, for the local path
	}{
		{name: "default is open", wantPath: sluice.PathOpen},
		{name: "default mode closed", opts: []Option{WithDefault(sluice.Failure{Mode: sluice.FailClosed})}, wantPath: sluice.PathClosed},
		{name: "default mode local, whole limit", opts: []Option{WithDefault(sluice.Failure{Mode: sluice.FailLocal})},
			wantPath: sluice.PathLocal, wantRate: 10, wantShare: 1},
		{name: "default local share", opts: []Option{WithDefault(sluice.Failure{Mode: sluice.FailLocal, Share: 0.5})},
			wantPath: sluice.PathLocal, wantRate: 5, wantShare: 0.5},
		{
			name: "defaults set in two calls", opts: []Option{
				WithDefault(sluice.Failure{Mode: sluice.FailLocal}), WithDefault(sluice.Failure{Share: 0.5})},
			wantPath: sluice.PathLocal, wantRate: 5, wantShare: 0.5,
		},
		{
			name:     "request overrides default",
			opts:     []Option{WithDefault(sluice.Failure{Mode: sluice.FailOpen})},
			failure:  sluice.Failure{Mode: sluice.FailLocal, Share: 0.2},
			wantPath: sluice.PathLocal, wantRate: 2, wantShare: 0.2,
		},
		{
			name:     "request mode overrides default mode",
			opts:     []Option{WithDefault(sluice.Failure{Mode: sluice.FailOpen, Share: 0.3})},
			failure:  sluice.Failure{Mode: sluice.FailClosed},
			wantPath: sluice.PathClosed,
		},
		{
			name:     "request mode, default share",
			opts:     []Option{WithDefault(sluice.Failure{Mode: sluice.FailOpen, Share: 0.3})},
			failure:  sluice.Failure{Mode: sluice.FailLocal},
			wantPath: sluice.PathLocal, wantRate: 3, wantShare: 0.3,
		},
		{
			name:     "request share out of range defers",
			opts:     []Option{WithDefault(sluice.Failure{Share: 0.5})},
			failure:  sluice.Failure{Mode: sluice.FailLocal, Share: 7},
			wantPath: sluice.PathLocal, wantRate: 5, wantShare: 0.5,
		},
		{
			name:     "request mode out of range defers",
			opts:     []Option{WithDefault(sluice.Failure{Mode: sluice.FailClosed})},
			failure:  sluice.Failure{Mode: 99},
			wantPath: sluice.PathClosed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			faulty := newFaultyStore(t)
			faulty.setFail(down)
			// A breaker that never opens, so that every call reaches the store.
			l := newLimiter(t, faulty, append(tt.opts, WithDeadline(time.Second), WithLocalLimiter(memoryStore(t)),
				WithBreaker(Breaker{ConsecutiveFailures: 1 << 30, MinCalls: 1 << 30}))...)
			ctx := context.Background()
			wantMode := map[sluice.Path]sluice.FailureMode{
				sluice.PathOpen: sluice.FailOpen, sluice.PathClosed: sluice.FailClosed, sluice.PathLocal: sluice.FailLocal,
			}[tt.wantPath]
			allowed := 0
			for i := 0; i < 12; i++ {
				d, rep, err := decideOne(ctx, l, sluice.Request{Key: "k", Limit: limit, N: 1, Failure: tt.failure})
				if d.Path != tt.wantPath {
					t.Fatalf("call %d: path %v, want %v", i, d.Path, tt.wantPath)
				}
				if rep.Kind != store.KindLoading || !errors.Is(rep.Failure, down) || !rep.StoreCalled {
					t.Errorf("call %d: report %+v, want the LOADING cause", i, rep)
				}
				if rep.Fallback.Mode != wantMode || (tt.wantPath == sluice.PathLocal && rep.Fallback.Share != tt.wantShare) {
					t.Errorf("call %d: report's Fallback %+v, want mode %v (share %v)", i, rep.Fallback, wantMode, tt.wantShare)
				}
				if rep.Breaker != store.BreakerClosed {
					t.Errorf("call %d: report's breaker %v, want closed", i, rep.Breaker)
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

// TestLocalWithoutLocalLimiter: FailLocal asks to keep limiting; with no local limiter
// to limit with, the request fails closed, whether the mode comes from the default or
// from the request.
func TestLocalWithoutLocalLimiter(t *testing.T) {
	down := storeErr(store.KindReadOnly, "READONLY You can't write against a read only replica.")
	limit := sluice.PerMinute(10)
	for _, tc := range []struct {
		name    string
		opts    []Option
		failure sluice.Failure
	}{
		{"default", []Option{WithDefault(sluice.Failure{Mode: sluice.FailLocal, Share: 0.5})}, sluice.Failure{}},
		{"request", nil, sluice.Failure{Mode: sluice.FailLocal, Share: 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			faulty := newFaultyStore(t)
			faulty.setFail(down)
			l := newLimiter(t, faulty, append(tc.opts, WithBreaker(Breaker{ConsecutiveFailures: 1 << 30, MinCalls: 1 << 30}))...)
			for i := 0; i < 3; i++ {
				d, rep, err := decideOne(context.Background(), l, sluice.Request{Key: "k", Limit: limit, N: 1, Failure: tc.failure})
				if d.Path != sluice.PathClosed || d.Allowed || d.Limit != limit || d.RetryAfter != time.Second {
					t.Fatalf("call %d: %+v; want a closed denial under the whole limit", i, d)
				}
				if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, down) {
					t.Fatalf("call %d: %v; want ErrStoreUnavailable and the cause", i, err)
				}
				if rep.Fallback.Mode != sluice.FailClosed || rep.Kind != store.KindReadOnly || !errors.Is(rep.Failure, down) {
					t.Errorf("call %d: report %+v; want the closed fallback and the READONLY cause", i, rep)
				}
			}
			// The multi-limit path follows the same rule.
			reqs := []sluice.Request{
				{Key: "k", Limit: limit, N: 1, Failure: tc.failure},
				{Key: "k", Limit: sluice.PerHour(100), N: 1, Failure: sluice.Failure{Mode: sluice.FailOpen}},
			}
			ds := make([]sluice.Decision, 2)
			rep, err := l.Decide(context.Background(), reqs, ds)
			if !errors.Is(err, sluice.ErrStoreUnavailable) || rep.Fallback.Mode != sluice.FailClosed ||
				ds[0].Path != sluice.PathClosed || ds[1].Path != sluice.PathClosed || ds[0].Allowed || ds[1].Allowed {
				t.Errorf("batch: %+v, %+v, %v; want closed", ds, rep, err)
			}
		})
	}
}

// TestShadowFailsOpen: a shadow limit measures without enforcing, so its failure never
// denies: it fails open whatever its Failure says, and it does not make a request of
// enforced limits stricter.
func TestShadowFailsOpen(t *testing.T) {
	ctx := context.Background()
	down := storeErr(store.KindClusterDown, "CLUSTERDOWN The cluster is down")
	closed := sluice.Failure{Mode: sluice.FailClosed}
	local := sluice.Failure{Mode: sluice.FailLocal, Share: 0.5}
	open := sluice.Failure{Mode: sluice.FailOpen}
	tests := []struct {
		name     string
		opts     []Option
		reqs     []sluice.Request
		wantPath sluice.Path
	}{
		{"shadow closed", nil,
			[]sluice.Request{{Key: "s", Limit: sluice.PerMinute(10), N: 1, Shadow: true, Failure: closed}}, sluice.PathOpen},
		{"shadow local", nil,
			[]sluice.Request{{Key: "s", Limit: sluice.PerMinute(10), N: 1, Shadow: true, Failure: local}}, sluice.PathOpen},
		{"shadow under a closed default", []Option{WithDefault(closed)},
			[]sluice.Request{{Key: "s", Limit: sluice.PerMinute(10), N: 1, Shadow: true}}, sluice.PathOpen},
		{"shadow closed with enforced open", nil, []sluice.Request{
			{Key: "e", Limit: sluice.PerMinute(10), N: 1, Failure: open},
			{Key: "s", Limit: sluice.PerHour(100), N: 1, Shadow: true, Failure: closed},
		}, sluice.PathOpen},
		{"shadow closed with enforced local", nil, []sluice.Request{
			{Key: "e", Limit: sluice.PerMinute(10), N: 1, Failure: local},
			{Key: "s", Limit: sluice.PerHour(100), N: 1, Shadow: true, Failure: closed},
		}, sluice.PathLocal},
		// The strictest of the enforced limits still decides.
		{"shadow open with enforced closed", nil, []sluice.Request{
			{Key: "e", Limit: sluice.PerMinute(10), N: 1, Failure: closed},
			{Key: "s", Limit: sluice.PerHour(100), N: 1, Shadow: true, Failure: open},
		}, sluice.PathClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			faulty := newFaultyStore(t)
			faulty.setFail(down)
			l := newLimiter(t, faulty, append(tt.opts, WithLocalLimiter(memoryStore(t)),
				WithBreaker(Breaker{ConsecutiveFailures: 1 << 30, MinCalls: 1 << 30}))...)
			wantMode := map[sluice.Path]sluice.FailureMode{
				sluice.PathOpen: sluice.FailOpen, sluice.PathClosed: sluice.FailClosed, sluice.PathLocal: sluice.FailLocal,
			}[tt.wantPath]
			ds := make([]sluice.Decision, len(tt.reqs))
			rep, err := l.Decide(ctx, tt.reqs, ds)
			if rep.Fallback.Mode != wantMode || rep.Kind != store.KindClusterDown || !errors.Is(rep.Failure, down) {
				t.Errorf("report %+v, want fallback %v and the CLUSTERDOWN cause", rep, wantMode)
			}
			for i, d := range ds {
				if d.Path != tt.wantPath || d.Limit.Period != tt.reqs[i].Limit.Period {
					t.Errorf("decision %d: %+v, want path %v", i, d, tt.wantPath)
				}
			}
			switch tt.wantPath {
			case sluice.PathClosed:
				if !errors.Is(err, sluice.ErrStoreUnavailable) || ds[0].Allowed {
					t.Errorf("closed: %+v, %v", ds, err)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				for i, d := range ds {
					if !d.Allowed {
						t.Errorf("decision %d denied: %+v", i, d)
					}
				}
			}
		})
	}
}

func TestBadInputIsNeverFailedOpen(t *testing.T) {
	faulty := newFaultyStore(t)
	l := newLimiter(t, faulty, WithDefault(sluice.Failure{Mode: sluice.FailOpen}), WithBreaker(Breaker{ConsecutiveFailures: 1}))
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
		d, rep, err := decideOne(ctx, l, sluice.Request{Key: b.key, Limit: b.limit, N: b.n})
		if !store.IsBadInput(err) || d.Allowed {
			t.Errorf("Decide(%q, %v, %d) = %+v, %v; want bad input", b.key, b.limit, b.n, d, err)
		}
		if rep.Kind != store.KindBadInput || rep.StoreCalled || rep.Failure != nil {
			t.Errorf("Decide(%q, %v, %d): report %+v", b.key, b.limit, b.n, rep)
		}
		if d, err := l.AllowN(ctx, b.key, b.limit, b.n); !store.IsBadInput(err) || d.Allowed {
			t.Errorf("AllowN(%q, %v, %d) = %+v, %v; want bad input", b.key, b.limit, b.n, d, err)
		}
	}
	if _, err := l.Decide(ctx, []sluice.Request{{Key: "k", Limit: sluice.PerSecond(1), N: 1}}, nil); !store.IsBadInput(err) {
		t.Errorf("no room for the decision: %v, want bad input", err)
	}
	// Bad input detected by the store itself (a duplicate in a batch) is returned as is
	// and does not trip a breaker that opens on the first failure.
	reqs := []sluice.Request{{Key: "k", Limit: sluice.PerSecond(5), N: 1}, {Key: "k", Limit: sluice.PerSecond(5), N: 1}}
	for i := 0; i < 3; i++ {
		if _, err := sluice.AllowMulti(ctx, l, reqs); !store.IsBadInput(err) {
			t.Fatalf("duplicate batch: %v, want bad input", err)
		}
	}
	faulty.setFail(fmt.Errorf("store says: %w", sluice.ErrInvalidLimit))
	for i := 0; i < 3; i++ {
		if _, err := l.AllowN(ctx, "k", sluice.PerSecond(5), 1); !store.IsBadInput(err) {
			t.Fatalf("store bad input: %v", err)
		}
	}
	if s := l.State(); s != store.BreakerClosed {
		t.Errorf("breaker %v after bad input, want closed", s)
	}
	if faulty.calls.Load() == 0 {
		t.Error("the store was never called")
	}
}

// TestDeadlineWithStoreIgnoringContext: a store that hangs regardless of its context
// still releases every caller at the deadline, and the goroutines left running end when
// the store returns.
func TestDeadlineWithStoreIgnoringContext(t *testing.T) {
	const deadline = 20 * time.Millisecond
	faulty := newFaultyStore(t)
	l := newLimiter(t, faulty, WithDeadline(deadline), WithDefault(sluice.Failure{Mode: sluice.FailClosed}),
		WithBreaker(Breaker{ConsecutiveFailures: 1 << 30, MinCalls: 1 << 30}), WithMaxPending(40))
	release := faulty.setHang()
	before := runtime.NumGoroutine()

	var wg sync.WaitGroup
	var worst atomic.Int64
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 3; i++ {
				start := time.Now()
				d, rep, err := decideOne(context.Background(), l, sluice.Request{Key: fmt.Sprint("k", g), Limit: sluice.PerSecond(10), N: 1})
				took := time.Since(start)
				if int64(took) > worst.Load() {
					worst.Store(int64(took))
				}
				if d.Path != sluice.PathClosed || !errors.Is(err, sluice.ErrStoreUnavailable) {
					t.Errorf("hanging store: %+v, %v; want closed", d, err)
				}
				if rep.Kind != store.KindTimeout && rep.Kind != store.KindOverload {
					t.Errorf("kind %q, want timeout or overload", rep.Kind)
				}
				if rep.Kind == store.KindTimeout && (!errors.Is(rep.Failure, ErrDeadline) || !rep.StoreCalled) {
					t.Errorf("timeout: report %+v, want the deadline as the cause of a store call", rep)
				}
				if rep.Kind == store.KindOverload && (!errors.Is(rep.Failure, ErrOverload) || rep.StoreCalled) {
					t.Errorf("overload: report %+v, want the overload as the cause, no store call", rep)
				}
			}
		}()
	}
	wg.Wait()
	// A hanging store is the fault and the deadline a runtime timer, which no clock
	// injects: the slowest decision may pass it by slack (scheduling on busy cores), and
	// the store never returns before release, so every answer is the deadline's.
	if w := time.Duration(worst.Load()); w > deadline+slack {
		t.Errorf("slowest decision took %v with a %v deadline", w, deadline)
	}
	// At most WithMaxPending calls were left running; the rest were not started.
	if n := faulty.calls.Load(); n > 40 {
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
	faulty := newFaultyStore(t)
	var mu sync.Mutex
	var changes []string
	openFor := 100 * time.Millisecond
	clk := clocktest.New(time.Now())
	l := newLimiter(t, faulty, WithBreaker(Breaker{ConsecutiveFailures: 3, FailingFor: -1, OpenFor: openFor, Probes: 2}),
		WithClock(clk.Now),
		WithStateChange(func(from, to sluice.BreakerState) {
			mu.Lock()
			changes = append(changes, from.String()+">"+to.String())
			mu.Unlock()
		}))
	ctx := context.Background()
	limit := sluice.PerSecond(1000)
	decide := func() (sluice.Decision, sluice.Report) {
		d, rep, err := decideOne(ctx, l, sluice.Request{Key: "k", Limit: limit, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d, rep
	}

	faulty.setFail(storeErr(store.KindBusy, "BUSY Redis is busy running a script."))
	for i := 0; i < 3; i++ {
		if d, _ := decide(); d.Path != sluice.PathOpen {
			t.Fatalf("failure %d: path %v", i, d.Path)
		}
	}
	if s := l.State(); s != store.BreakerOpen {
		t.Fatalf("after 3 failures: %v, want open", s)
	}
	calls := faulty.calls.Load()
	d, rep := decide()
	if d.Path != sluice.PathOpen || rep.StoreCalled || rep.Kind != store.KindBreakerOpen || rep.Breaker != store.BreakerOpen ||
		!errors.Is(rep.Failure, ErrBreakerOpen) {
		t.Fatalf("open breaker: %+v %+v", d, rep)
	}
	if faulty.calls.Load() != calls {
		t.Fatal("the store was called while the breaker was open")
	}

	clk.Advance(openFor + time.Microsecond)
	if s := l.State(); s != store.BreakerHalfOpen {
		t.Fatalf("after OpenFor: %v, want half-open", s)
	}
	if _, rep := decide(); !rep.StoreCalled || rep.Breaker != store.BreakerOpen { // the probe fails
		t.Fatalf("failed probe: %+v", rep)
	}

	clk.Advance(openFor + time.Microsecond)
	faulty.setFail(nil)
	for i := 0; i < 2; i++ {
		if d, _ := decide(); d.Path != sluice.PathStore {
			t.Fatalf("probe %d: path %v", i, d.Path)
		}
	}
	if s := l.State(); s != store.BreakerClosed {
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
	faulty := newFaultyStore(t)
	l := newLimiter(t, faulty, WithBreaker(Breaker{ConsecutiveFailures: 100, FailingFor: -1, FailureRatio: 0.5, MinCalls: 10}))
	ctx := context.Background()
	limit := sluice.PerSecond(1000)
	readOnly := storeErr(store.KindReadOnly, "READONLY You can't write against a read only replica.")
	for i := 0; i < 9; i++ { // alternate: never two failures in a row
		if i%2 == 0 {
			faulty.setFail(readOnly)
		} else {
			faulty.setFail(nil)
		}
		l.AllowN(ctx, "k", limit, 1)
		if s := l.State(); s != store.BreakerClosed {
			t.Fatalf("call %d: %v before MinCalls", i, s)
		}
	}
	faulty.setFail(nil)
	l.AllowN(ctx, "k", limit, 1) // 10 calls, 5 failures: ratio 0.5 is reached on the next failure
	if s := l.State(); s != store.BreakerClosed {
		t.Fatalf("ratio reached on a success: %v (the breaker trips on failures)", s)
	}
	faulty.setFail(readOnly)
	l.AllowN(ctx, "k", limit, 1)
	if s := l.State(); s != store.BreakerOpen {
		t.Fatalf("6 failures in 11 calls: %v, want open", s)
	}
}

func TestCallerCancellationIsNotAStoreFailure(t *testing.T) {
	faulty := newFaultyStore(t)
	l := newLimiter(t, faulty, WithDeadline(time.Second), WithDefault(sluice.Failure{Mode: sluice.FailOpen}), WithBreaker(Breaker{ConsecutiveFailures: 1}))
	release := faulty.setHang()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	d, rep, err := decideOne(ctx, l, sluice.Request{Key: "k", Limit: sluice.PerSecond(1), N: 1})
	if !errors.Is(err, context.DeadlineExceeded) || d.Allowed || d.Path != sluice.PathStore {
		t.Errorf("caller deadline: %+v, %v; want the caller's context error, not a fallback", d, err)
	}
	if rep.Kind != store.KindTimeout || rep.Failure != nil {
		t.Errorf("report %+v", rep)
	}
	release()
	if s := l.State(); s != store.BreakerClosed {
		t.Errorf("breaker %v after the caller's own deadline", s)
	}
}

// TestStoreCancellationIsAStoreFailure: a store call that ends with a cancellation while
// the caller's context is live was cancelled by someone else (the Redis store's client
// dials one connection for every call waiting on it, under the first one's context), so
// the store could not decide: the failure mode decides, the breaker counts it, and the
// caller never sees context.Canceled.
func TestStoreCancellationIsAStoreFailure(t *testing.T) {
	limit := sluice.PerMinute(10)
	causes := map[string]error{
		"unclassified": fmt.Errorf("store: dial: %w", context.Canceled),
		"classified":   &sluice.StoreError{Kind: store.KindCanceled, Err: fmt.Errorf("store: dial: %w", context.Canceled)},
	}
	modes := []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal}
	for _, inline := range []bool{false, true} {
		for cname, cause := range causes {
			for _, mode := range modes {
				t.Run(fmt.Sprintf("inline=%v/%s/%v", inline, cname, mode), func(t *testing.T) {
					faulty := newFaultyStore(t)
					opts := []Option{WithDefault(sluice.Failure{Mode: mode}), WithLocalLimiter(memoryStore(t)),
						WithBreaker(Breaker{ConsecutiveFailures: 2, FailingFor: -1})}
					if inline {
						opts = append(opts, WithInlineCalls())
					}
					l := newLimiter(t, faulty, opts...)
					faulty.setFail(cause)
					d, rep, err := decideOne(context.Background(), l, sluice.Request{Key: "k", Limit: limit, N: 1})
					if errors.Is(err, context.Canceled) {
						t.Fatalf("a live caller got %v", err)
					}
					if d.Path != pathOf(mode) {
						t.Errorf("path %v, want %v (%+v, %v)", d.Path, pathOf(mode), d, err)
					}
					if (mode == sluice.FailClosed) != errors.Is(err, sluice.ErrStoreUnavailable) || mode != sluice.FailClosed && err != nil {
						t.Errorf("error %v in mode %v", err, mode)
					}
					if rep.Kind != store.KindRefused || rep.Failure == nil || !rep.StoreCalled {
						t.Errorf("report %+v, want a store failure of kind %q", rep, store.KindRefused)
					}
					// The breaker counts it: a second one opens it.
					decideOne(context.Background(), l, sluice.Request{Key: "k", Limit: limit, N: 1})
					if s := l.State(); s != store.BreakerOpen {
						t.Errorf("breaker %v after two store cancellations, want open", s)
					}
				})
			}
		}
	}
	// Calls that are not decisions: the store is unavailable, not the caller cancelled.
	faulty := newFaultyStore(t)
	l := newLimiter(t, faulty, WithBreaker(Breaker{ConsecutiveFailures: 1 << 20}))
	faulty.setFail(causes["unclassified"])
	ctx := context.Background()
	_, err := l.Reserve(ctx, "k", sluice.PerSecond(1), 1)
	if !errors.Is(err, sluice.ErrStoreUnavailable) || errors.Is(err, context.Canceled) {
		t.Errorf("Reserve: %v, want ErrStoreUnavailable and no context.Canceled", err)
	}
	if err := l.Reset(ctx, "k", limit); !errors.Is(err, sluice.ErrStoreUnavailable) || errors.Is(err, context.Canceled) {
		t.Errorf("Reset: %v, want ErrStoreUnavailable and no context.Canceled", err)
	}
}

// notAtomicStore is a store that cannot decide several requests in one step, as the Redis
// store cannot when their keys are in different cluster slots.
type notAtomicStore struct{ *memory.Store }

func (s notAtomicStore) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	if len(reqs) > 1 {
		return sluice.Report{Kind: store.KindBadInput}, fmt.Errorf("test store: %w", sluice.ErrInvalidKey)
	}
	return s.Store.Decide(ctx, reqs, ds)
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
	t.Run("not atomic primary", func(t *testing.T) {
		// Bad input from the store is its answer, not a failure: returned as is, never failed
		// open, never counted by the breaker.
		l := newLimiter(t, notAtomicStore{memoryStore(t)}, WithBreaker(Breaker{ConsecutiveFailures: 1, FailingFor: -1}))
		for i := 0; i < 3; i++ {
			if ds, err := sluice.AllowMulti(ctx, l, reqs); !errors.Is(err, sluice.ErrInvalidKey) || ds != nil {
				t.Fatalf("%+v, %v, want the store's error", ds, err)
			}
			ds := make([]sluice.Decision, len(reqs))
			rep, err := l.Decide(ctx, reqs, ds)
			if !errors.Is(err, sluice.ErrInvalidKey) || rep.Kind != store.KindBadInput || rep.Failure != nil || ds[0].Allowed || ds[0].Path != sluice.PathStore {
				t.Fatalf("%+v, %+v, %v, want the store's error and no fallback", ds, rep, err)
			}
		}
		if s := l.State(); s != store.BreakerClosed {
			t.Errorf("breaker %v after the store's error, want closed", s)
		}
	})
	tests := []struct {
		name     string
		m0, m1   sluice.FailureMode
		wantPath sluice.Path
	}{
		{"open+open", sluice.FailOpen, sluice.FailOpen, sluice.PathOpen},
		{"open+local", sluice.FailOpen, sluice.FailLocal, sluice.PathLocal},
		{"local+closed", sluice.FailLocal, sluice.FailClosed, sluice.PathClosed},
		{"inherit+local", sluice.FailInherit, sluice.FailLocal, sluice.PathLocal},
	}
	for _, tt := range tests {
		t.Run("strictest mode "+tt.name, func(t *testing.T) {
			faulty := newFaultyStore(t)
			faulty.setFail(storeErr(store.KindClusterDown, "CLUSTERDOWN The cluster is down"))
			l := newLimiter(t, faulty, WithLocalLimiter(memoryStore(t)), WithDefault(sluice.Failure{Share: 0.5}))
			reqs := []sluice.Request{
				{Key: "a", Limit: sluice.PerMinute(10), N: 1, Failure: sluice.Failure{Mode: tt.m0, Share: 0.5}},
				{Key: "a", Limit: sluice.PerHour(100), N: 1, Failure: sluice.Failure{Mode: tt.m1, Share: 0.5}},
			}
			allowed := 0
			for i := 0; i < 8; i++ {
				ds := make([]sluice.Decision, len(reqs))
				rep, err := l.Decide(ctx, reqs, ds)
				if tt.wantPath == sluice.PathClosed {
					if !errors.Is(err, sluice.ErrStoreUnavailable) {
						t.Fatalf("closed: %v", err)
					}
				} else if err != nil {
					t.Fatal(err)
				}
				if pathOf(rep.Fallback.Mode) != tt.wantPath || rep.Kind != store.KindClusterDown {
					t.Fatalf("report %+v, want the fallback of path %v", rep, tt.wantPath)
				}
				for _, d := range ds {
					if d.Path != tt.wantPath {
						t.Fatalf("path %v, want %v", d.Path, tt.wantPath)
					}
				}
				if tt.wantPath == sluice.PathLocal && (ds[0].Limit.Rate != 5 || ds[1].Limit.Rate != 50) {
					t.Fatalf("local limits %v and %v, want the halves", ds[0].Limit, ds[1].Limit)
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
	faulty := newFaultyStore(t)
	faulty.setFail(storeErr(store.KindOOM, "OOM command not allowed when used memory > 'maxmemory'."))
	l := newLimiter(t, faulty, WithDefault(sluice.Failure{Mode: sluice.FailLocal, Share: 0.25}), WithLocalLimiter(memoryStore(t)))
	d, err := l.AllowN(context.Background(), "k", sluice.PerSecond(8), 4) // share allows 2
	if err != nil || d.Allowed || d.Path != sluice.PathLocal || d.Limit.Rate != 2 || d.RetryAfter <= 0 {
		t.Errorf("%+v, %v; want a local denial with a RetryAfter", d, err)
	}
}

func TestReset(t *testing.T) {
	faulty := newFaultyStore(t)
	l := newLimiter(t, faulty, WithDefault(sluice.Failure{Mode: sluice.FailLocal}), WithLocalLimiter(memoryStore(t)))
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
	faulty.setFail(storeErr(store.KindLoading, "LOADING Redis is loading the dataset in memory"))
	if err := l.Reset(ctx, "k", limit); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("Reset on a failing store: %v, want ErrStoreUnavailable", err)
	}
	if err := l.Reset(ctx, "", limit); !store.IsBadInput(err) {
		t.Fatalf("Reset with an empty key: %v", err)
	}
}

// TestResetLocal: Reset forgets the key's state in the local limiter too.
func TestResetLocal(t *testing.T) {
	faulty := newFaultyStore(t)
	faulty.setFail(storeErr(store.KindLoading, "LOADING Redis is loading the dataset in memory"))
	l := newLimiter(t, faulty, WithDefault(sluice.Failure{Mode: sluice.FailLocal, Share: 0.5}), WithLocalLimiter(memoryStore(t)),
		WithBreaker(Breaker{ConsecutiveFailures: 1 << 30, MinCalls: 1 << 30}))
	ctx := context.Background()
	limit := sluice.PerMinute(2) // a local share of 1
	if d, err := l.AllowN(ctx, "k", limit, 1); err != nil || !d.Allowed || d.Path != sluice.PathLocal {
		t.Fatalf("first local call: %+v, %v", d, err)
	}
	if d, err := l.AllowN(ctx, "k", limit, 1); err != nil || d.Allowed {
		t.Fatalf("second local call: %+v, %v; want denied by the share", d, err)
	}
	if err := l.Reset(ctx, "k", limit); !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("Reset on a failing store: %v, want ErrStoreUnavailable", err)
	}
	if d, err := l.AllowN(ctx, "k", limit, 1); err != nil || !d.Allowed || d.Path != sluice.PathLocal {
		t.Fatalf("after Reset: %+v, %v; want the local share afresh", d, err)
	}
}

// TestReserve: a reservation goes to the store through the breaker, without the
// decision deadline; while the store fails or the breaker is open it is an error
// wrapping ErrStoreUnavailable, never a reservation made up by a failure mode.
func TestReserve(t *testing.T) {
	ctx := context.Background()
	limit := sluice.PerSecond(10)
	faulty := newFaultyStore(t)
	l := newLimiter(t, faulty, WithDeadline(20*time.Millisecond), WithDefault(sluice.Failure{Mode: sluice.FailOpen}),
		WithBreaker(Breaker{ConsecutiveFailures: 2, FailingFor: -1, OpenFor: time.Hour}))

	// Through to the store, sharing its state with decisions.
	res, err := l.Reserve(ctx, "k", limit, 10)
	if err != nil || !res.OK || res.N != 10 || res.Limit != limit || res.Delay != 0 {
		t.Fatalf("Reserve of the burst: %+v, %v", res, err)
	}
	if d, err := l.AllowN(ctx, "k", limit, 1); err != nil || d.Allowed || d.Path != sluice.PathStore {
		t.Fatalf("after reserving the burst: %+v, %v; want a store denial", d, err)
	}
	res, err = l.Reserve(ctx, "k", limit, 1)
	if err != nil || !res.OK || res.Delay <= 0 {
		t.Fatalf("Reserve past the burst: %+v, %v; want a delay", res, err)
	}
	// Without the decision deadline: a store slower than it still reserves.
	release := faulty.setHang()
	var released atomic.Bool
	// The store hangs for five deadlines of real time (the deadline is a real timer).
	timer := time.AfterFunc(100*time.Millisecond, func() { released.Store(true); release() })
	defer timer.Stop()
	res, err = l.Reserve(ctx, "slow", limit, 1)
	if err != nil || !res.OK {
		t.Fatalf("Reserve on a store slower than the deadline: %+v, %v", res, err)
	}
	if !released.Load() {
		t.Errorf("Reserve returned before the store answered")
	}
	// Bad input, including a limit that cannot be reserved, is returned as is and does
	// not count against the store.
	for i := 0; i < 3; i++ {
		if _, err := l.Reserve(ctx, "", limit, 1); !store.IsBadInput(err) {
			t.Fatalf("Reserve with an empty key: %v", err)
		}
		if _, err := l.Reserve(ctx, "k", limit.With(sluice.FixedWindow), 1); !errors.Is(err, sluice.ErrInvalidLimit) || errors.Is(err, sluice.ErrStoreUnavailable) {
			t.Fatalf("Reserve of a fixed window: %v, want ErrInvalidLimit", err)
		}
	}
	if s := l.State(); s != store.BreakerClosed {
		t.Fatalf("breaker %v after bad input, want closed", s)
	}

	// A failing store: ErrStoreUnavailable and the cause, counted by the breaker.
	down := storeErr(store.KindRefused, "dial tcp: connection refused")
	faulty.setFail(down)
	for i := 0; i < 2; i++ {
		res, err := l.Reserve(ctx, "k2", limit, 1)
		if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, down) || res.OK {
			t.Fatalf("Reserve on a failing store: %+v, %v; want ErrStoreUnavailable", res, err)
		}
	}
	if s := l.State(); s != store.BreakerOpen {
		t.Fatalf("breaker %v after 2 failed reservations, want open", s)
	}

	// An open breaker: ErrStoreUnavailable without calling the store.
	faulty.setFail(nil)
	calls := faulty.calls.Load()
	res, err = l.Reserve(ctx, "k3", limit, 1)
	if !errors.Is(err, sluice.ErrStoreUnavailable) || !errors.Is(err, ErrBreakerOpen) || sluice.KindOf(err) != store.KindBreakerOpen || res.OK {
		t.Fatalf("Reserve with the breaker open: %+v, %v; want ErrStoreUnavailable", res, err)
	}
	if faulty.calls.Load() != calls {
		t.Error("the store was called while the breaker was open")
	}
	// Decisions meanwhile follow their failure mode.
	if d, err := l.AllowN(ctx, "k3", limit, 1); err != nil || d.Path != sluice.PathOpen {
		t.Errorf("decision with the breaker open: %+v, %v", d, err)
	}

	l.Close()
	if _, err := l.Reserve(ctx, "k", limit, 1); !errors.Is(err, sluice.ErrClosed) || errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Errorf("Reserve after Close: %v, want ErrClosed", err)
	}
}

// TestBreakerFailingFor: a burst of simultaneous failures (one slow coalesced store call
// failing every decision it carried) does not open the breaker; failures that go on for
// FailingFor do.
func TestBreakerFailingFor(t *testing.T) {
	faulty := newFaultyStore(t)
	clk := clocktest.New(time.Now())
	l := newLimiter(t, faulty, WithBreaker(Breaker{ConsecutiveFailures: 5, FailingFor: 100 * time.Millisecond}), WithClock(clk.Now))
	ctx := context.Background()
	limit := sluice.PerSecond(1000)
	faulty.setFail(storeErr(store.KindBusy, "BUSY Redis is busy running a script."))
	for i := 0; i < 50; i++ {
		l.AllowN(ctx, "k", limit, 1)
	}
	if s := l.State(); s != store.BreakerClosed {
		t.Fatalf("a burst of 50 failures at one instant opened the breaker")
	}
	clk.Advance(99 * time.Millisecond)
	l.AllowN(ctx, "k", limit, 1)
	if s := l.State(); s != store.BreakerClosed {
		t.Fatalf("failures for 99ms opened the breaker")
	}
	clk.Advance(time.Millisecond)
	l.AllowN(ctx, "k", limit, 1)
	if s := l.State(); s != store.BreakerOpen {
		t.Fatalf("failures for 100ms: breaker %v, want open", s)
	}
}

// cacheStore answers while failing like a layer below failover that decides some
// requests without asking the store (a deny cache): its Report says the store was not
// called.
type cacheStore struct {
	*faultyStore
	cached atomic.Bool
}

func (s *cacheStore) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	if s.cached.Load() {
		for i := range reqs {
			ds[i] = sluice.Decision{Limit: reqs[i].Limit, RetryAfter: time.Second, Path: sluice.PathCache}
		}
		return sluice.Report{}, nil
	}
	return s.faultyStore.Decide(ctx, reqs, ds)
}

// TestAnswerWithoutStore: an answer of the layer below that did not ask the store is
// passed on with StoreCalled false, and says nothing about the store to the breaker: it
// does not break a streak of failures.
func TestAnswerWithoutStore(t *testing.T) {
	faulty := &cacheStore{faultyStore: newFaultyStore(t)}
	l := newLimiter(t, faulty, WithBreaker(Breaker{ConsecutiveFailures: 3, FailingFor: -1, OpenFor: time.Hour}))
	ctx := context.Background()
	req := sluice.Request{Key: "k", Limit: sluice.PerSecond(10), N: 1}

	d, rep, err := decideOne(ctx, l, req)
	if err != nil || !d.Allowed || d.Path != sluice.PathStore || !rep.StoreCalled || rep.Breaker != store.BreakerClosed {
		t.Fatalf("store answer: %+v, %+v, %v", d, rep, err)
	}
	faulty.setFail(storeErr(store.KindBusy, "BUSY Redis is busy running a script."))
	for i := 0; i < 2; i++ {
		if d, _, _ := decideOne(ctx, l, req); d.Path != sluice.PathOpen {
			t.Fatalf("failure %d: %+v", i, d)
		}
	}
	faulty.cached.Store(true)
	d, rep, err = decideOne(ctx, l, req)
	if err != nil || d.Allowed || d.Path != sluice.PathCache || rep.StoreCalled || rep.Failure != nil || rep.Kind != "" {
		t.Fatalf("answer without the store: %+v, %+v, %v", d, rep, err)
	}
	if s := l.State(); s != store.BreakerClosed {
		t.Fatalf("breaker %v after 2 failures", s)
	}
	faulty.cached.Store(false)
	decideOne(ctx, l, req) // the third failure in a row, the cached answer not counting
	if s := l.State(); s != store.BreakerOpen {
		t.Fatalf("breaker %v after 3 store failures around a cached answer, want open", s)
	}
}

// TestCloseWaitsForStoreCalls: Close returns only once the store calls under way have
// ended, inline or on goroutines whose callers left at the deadline, and later decisions
// are refused.
func TestCloseWaitsForStoreCalls(t *testing.T) {
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			faulty := newFaultyStore(t)
			opts := []Option{WithDeadline(time.Millisecond)}
			if inline {
				opts = append(opts, WithInlineCalls())
			}
			l := newLimiter(t, faulty, opts...)
			release := faulty.setHang()
			const n = 4
			var wg sync.WaitGroup
			for range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l.AllowN(context.Background(), "k", sluice.PerSecond(10), 1)
				}()
			}
			poll.Until(t, 10*time.Second, "every call in the store", func() bool { return faulty.calls.Load() >= n })
			closed := make(chan struct{})
			go func() {
				l.Close()
				close(closed)
			}()
			select {
			case <-closed:
				t.Fatal("Close returned while store calls were running")
			case <-time.After(50 * time.Millisecond):
			}
			release()
			<-closed
			wg.Wait()
			if p := l.pending.Load(); p != 0 {
				t.Errorf("%d calls pending after Close", p)
			}
			if _, err := l.AllowN(context.Background(), "k", sluice.PerSecond(10), 1); !errors.Is(err, sluice.ErrClosed) {
				t.Errorf("after Close: %v, want ErrClosed", err)
			}
		})
	}
}

// TestStrictness: a request whose limits name different failure modes fails as the
// strictest says: closed, then local, then open, then inherit.
func TestStrictness(t *testing.T) {
	order := []sluice.FailureMode{sluice.FailInherit, sluice.FailOpen, sluice.FailLocal, sluice.FailClosed}
	strictness := func(m sluice.FailureMode) int { return slices.Index(byStrictness, m) }
	for i := 1; i < len(order); i++ {
		if strictness(order[i]) <= strictness(order[i-1]) {
			t.Errorf("strictness(%v) = %d, not above strictness(%v) = %d", order[i], strictness(order[i]), order[i-1], strictness(order[i-1]))
		}
	}
}
