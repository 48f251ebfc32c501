package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// newTestClock returns a settable clock for the stores under test.
func newTestClock() *clocktest.Clock {
	return clocktest.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
}

// open opens a store on srv's URL, closed when the test ends.
func open(t testing.TB, url string, opts ...Option) *Store {
	t.Helper()
	s, err := Open(url, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// limitsFor returns a few limits of algorithm a, with awkward periods and bursts.
func limitsFor(a sluice.Algorithm) []sluice.Limit {
	if a == sluice.Concurrency {
		return []sluice.Limit{
			sluice.InFlight(1, 3*time.Millisecond), sluice.InFlight(3, 50*time.Millisecond),
			sluice.InFlight(5, time.Second), sluice.InFlight(2, time.Hour),
		}
	}
	base := []sluice.Limit{
		{Rate: 5, Period: time.Second},
		{Rate: 3, Period: 7 * time.Millisecond},
		{Rate: 10, Period: time.Minute, Burst: 4},
		{Rate: 7, Period: 1003 * time.Microsecond, Burst: 12},
		{Rate: 1, Period: time.Hour},
	}
	return withAlgorithm(a, base)
}

// withAlgorithm sets every limit's algorithm to a.
func withAlgorithm(a sluice.Algorithm, ls []sluice.Limit) []sluice.Limit {
	for i := range ls {
		ls[i].Algorithm = a
	}
	return ls
}

func TestAllowNEveryAlgorithm(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clock := newTestClock()
	s := open(t, srv.URL(), WithClock(clock.Now), WithMinTTL(time.Hour))
	ctx := context.Background()
	for _, a := range store.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			l := sluice.Limit{Algorithm: a, Rate: 3, Period: time.Second}
			key := "basic:" + a.String()
			for i := int64(1); i <= 3; i++ {
				d, err := s.AllowN(ctx, key, l, 1)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed || d.Remaining != 3-i || d.Limit != l {
					t.Fatalf("decision %d: %+v, want allowed with %d remaining", i, d, 3-i)
				}
			}
			d, err := s.AllowN(ctx, key, l, 1)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > time.Second {
				t.Fatalf("4th decision: %+v, want denied with 0 < RetryAfter ≤ 1s", d)
			}
			// A look spends nothing.
			if d2, err := s.AllowN(ctx, key, l, 0); err != nil || d2 != d {
				t.Fatalf("look: %+v, %v; want %+v", d2, err, d)
			}
			if err := s.Reset(ctx, key, l); err != nil {
				t.Fatal(err)
			}
			if d, err := s.AllowN(ctx, key, l, 3); err != nil || !d.Allowed {
				t.Fatalf("after Reset: %+v, %v; want allowed", d, err)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL())
	ctx := context.Background()
	ok := sluice.PerSecond(10)
	tests := []struct {
		name  string
		key   string
		limit sluice.Limit
		n     int64
		want  error
	}{
		{"empty key", "", ok, 1, sluice.ErrInvalidKey},
		{"long key", strings.Repeat("k", store.MaxKeyLen+1), ok, 1, sluice.ErrInvalidKey},
		{"zero limit", "k", sluice.Limit{}, 1, sluice.ErrInvalidLimit},
		{"negative cost", "k", ok, -1, sluice.ErrInvalidCost},
		{"cost above burst", "k", ok, 11, sluice.ErrCostExceedsLimit},
	}
	check := func(when string) {
		for _, tt := range tests {
			if _, err := s.AllowN(ctx, tt.key, tt.limit, tt.n); !errors.Is(err, tt.want) {
				t.Errorf("%s, %s: err = %v, want %v", tt.name, when, err, tt.want)
			}
		}
		if _, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: "k", Limit: ok, N: 1}, {Key: "k", Limit: ok, N: 1}}); !errors.Is(err, sluice.ErrInvalidKey) {
			t.Errorf("repeated request, %s: err = %v, want ErrInvalidKey", when, err)
		}
	}
	check("before any decision")
	if n := srv.MustDo("DBSIZE"); n != "0" {
		t.Errorf("bad input wrote %s keys", n)
	}
	// A decision under ok keeps its limit's info, which later requests under ok are
	// checked against without validating the Limit again (checkedInfo).
	if d, err := s.AllowN(ctx, "good", ok, 1); err != nil || !d.Allowed {
		t.Fatalf("good request: %+v, %v", d, err)
	}
	check("with the limit's info kept")
	if n := srv.MustDo("DBSIZE"); n != "1" {
		t.Errorf("bad input wrote %s keys beside the good request's one", n)
	}
}

func TestOptionsRejected(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, opt := range []Option{WithPrefix("a{b"), WithPrefix("}"), WithBatchSize(0), WithConcurrency(0), WithMinTTL(-time.Second)} {
		if s, err := Open(srv.URL(), opt); err == nil {
			s.Close()
			t.Errorf("option accepted, want an error")
		}
	}
	if _, err := Open("http://localhost"); err == nil {
		t.Error("Open accepted an http URL")
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s, err := Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.AllowN(ctx, "k", sluice.PerSecond(1), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AllowN(ctx, "k", sluice.PerSecond(1), 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	if _, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: "k", Limit: sluice.PerSecond(1), N: 1}}); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("AllowMulti after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestContextCancelled(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.AllowN(ctx, "k", sluice.PerSecond(1), 1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v, want context.Canceled", err)
	}
	// A paused server: the decision returns at the caller's deadline.
	srv.Pause()
	defer srv.Resume()
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := s.AllowN(ctx, "k2", sluice.PerSecond(1), 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("paused server: %v, want DeadlineExceeded", err)
	}
	// A real fault (SIGSTOP): the answer comes at the 50ms deadline, not when Redis
	// resumes; 1s of slack is scheduling on busy cores.
	if el := time.Since(start); el > time.Second {
		t.Errorf("decision on a paused server took %v with a 50ms deadline", el)
	}
	// No deadline, cancelled while waiting: the decision returns at the cancellation,
	// whether it went out on the caller's goroutine (the first one, with the batcher
	// idle) or queued behind the calls in flight.
	for i := range 4 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		if _, err := s.AllowN(ctx, fmt.Sprint("k3-", i), sluice.PerSecond(1), 1); !errors.Is(err, context.Canceled) {
			t.Errorf("paused server, cancelled: %v, want context.Canceled", err)
		}
		// Real fault, as above: 1s of slack past the 50ms cancellation.
		if el := time.Since(start); el > time.Second {
			t.Errorf("decision %d on a paused server took %v, cancelled after 50ms", i, el)
		}
	}
}

// TestRepeats: the script is told to track its writes exactly when a key repeats in a call
// (a miss would let two requests on one key spend the same state).
func TestRepeats(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		want bool
	}{
		{nil, false},
		{[]string{"a"}, false},
		{[]string{"a", "b"}, false},
		{[]string{"a", "a"}, true},
		{[]string{"a", "b", "c", "d"}, false},
		{[]string{"a", "b", "c", "a"}, true},
		{[]string{"x{1}", "x{2}", "x{1}"}, true},
		{manyKeys(300), false},
		{append(manyKeys(300), "k7"), true},
		{append(manyKeys(5), manyKeys(300)...), true},
	} {
		if got := repeats(tc.keys); got != tc.want {
			t.Errorf("repeats(%q) = %v, want %v", tc.keys, got, tc.want)
		}
		// Twice: the pooled set must come back empty.
		if got := repeats(tc.keys); got != tc.want {
			t.Errorf("repeats(%q) second time = %v, want %v", tc.keys, got, tc.want)
		}
	}
}

// manyKeys returns n distinct keys, k0 to k<n-1>.
func manyKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	return keys
}

// TestExtraCallsWaitForEnoughDecisions: with two script calls in flight, a third goes out
// only once minExtraCall decisions wait for it; fewer wait for one of the two to return
// and then share a call.
func TestExtraCallsWaitForEnoughDecisions(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL(), WithConcurrency(3))
	ctx := context.Background()
	limit := sluice.Limit{Rate: 1000, Period: time.Second}
	if _, err := s.AllowN(ctx, "warm", limit, 1); err != nil { // loads the script
		t.Fatal(err)
	}
	for _, tc := range []struct {
		decisions int
		calls     int64
	}{
		{5, 3},                // 1, 1, then the 3 that waited, together
		{2 + minExtraCall, 3}, // 1, 1, and a third call once minExtraCall wait
		{3 + minExtraCall, 4}, // ... and the one after it, once a call returns
	} {
		srv.MustDo("CONFIG", "RESETSTAT")
		srv.Pause() // the calls reach Redis's socket, and wait there
		var wg sync.WaitGroup
		for i := 0; i < tc.decisions; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.AllowN(ctx, fmt.Sprintf("extra:%d:%d", tc.decisions, i), limit, 1); err != nil {
					t.Error(err)
				}
			}()
			time.Sleep(20 * time.Millisecond) // real-fault test: Redis is stopped; the calls reach its socket one at a time, in order
		}
		srv.Resume()
		wg.Wait()
		if calls, _ := srv.ScriptStats(); calls != tc.calls {
			t.Errorf("%d decisions made %d script calls, want %d", tc.decisions, calls, tc.calls)
		}
	}
}

// TestClockAtTheEpoch: as memory's, on Redis with a caller's clock at the epoch.
func TestClockAtTheEpoch(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL(), WithClock(func() time.Time { return time.Unix(0, 0) }), WithMinTTL(time.Hour))
	ctx := context.Background()
	for _, a := range store.Algorithms() {
		l := sluice.Limit{Algorithm: a, Rate: 5, Period: time.Second}
		admitted := 0
		for i := 0; i < 3; i++ {
			d, err := s.AllowN(ctx, "epoch", l, l.MaxCost())
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted++
			}
		}
		if admitted != 1 {
			t.Errorf("%v: %d requests of the whole burst admitted, want 1", a, admitted)
		}
	}
}

// TestNewLeavesTheClientOpen: a Store made with New decides on the caller's client, and
// Close stops the store without closing that client.
func TestNewLeavesTheClientOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s, err := New(client)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l := sluice.PerMinute(2)
	for i, want := range []bool{true, true, false} {
		d, err := s.AllowN(ctx, "owned-by-caller", l, 1)
		if err != nil || d.Allowed != want {
			t.Fatalf("decision %d: %+v %v, want allowed=%v", i, d, err, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AllowN(ctx, "owned-by-caller", l, 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	if _, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: "k", Limit: l, N: 1}}); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("AllowMulti after Close: %v, want ErrClosed", err)
	}
	if got, err := client.Do(ctx, client.B().Ping().Build()).ToString(); err != nil || got != "PONG" {
		t.Fatalf("the caller's client after the store's Close: %q %v", got, err)
	}
}

// TestInfoCache: info returns the info of the Limit asked for, one per Limit, however
// many Limits share a slot of the cache in front of the map.
func TestInfoCache(t *testing.T) {
	s := newStore(options{prefix: DefaultPrefix})
	var limits []sluice.Limit
	for r := int64(1); r <= 200; r++ {
		l := sluice.Limit{Algorithm: sluice.Algorithm(r % 6), Rate: r, Period: time.Second}
		limits = append(limits, l, l.WithBurst(2*r))
	}
	first := map[sluice.Limit]*limitInfo{}
	for round := 0; round < 3; round++ {
		for _, l := range limits {
			li := s.info(l)
			if li.limit != l {
				t.Fatalf("info(%v) is the info of %v", l, li.limit)
			}
			if p, ok := first[l]; ok && p != li {
				t.Fatalf("info(%v) made twice", l)
			}
			first[l] = li
		}
	}
}

// TestEscapeIdentity: escaping replaces exactly '%', '{' and '}', wherever they are in
// short and long identities (which are scanned differently, see plain).
func TestEscapeIdentity(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 40, 300} {
		base := strings.Repeat("a:b", n)[:n]
		if got := escapeIdentity(base); got != base {
			t.Errorf("escapeIdentity(%q) = %q", base, got)
		}
		for i := 0; i < n; i++ {
			for c, esc := range map[byte]string{'%': "%25", '{': "%7B", '}': "%7D"} {
				id := base[:i] + string(c) + base[i+1:]
				want := base[:i] + esc + base[i+1:]
				if got := escapeIdentity(id); got != want {
					t.Fatalf("escapeIdentity(%q) = %q, want %q", id, got, want)
				}
				if got := string(appendEscaped([]byte("x"), id)); got != "x"+want {
					t.Fatalf("appendEscaped(%q) = %q, want %q", id, got, "x"+want)
				}
			}
		}
	}
	if got, want := escapeIdentity(strings.Repeat("}", 20)+"{%"), strings.Repeat("%7D", 20)+"%7B%25"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
