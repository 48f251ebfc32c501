package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/store"
)

var start = time.Date(2026, 11, 1, 5, 59, 0, 0, time.UTC) // an hour before US DST ends

func newTestStore(t *testing.T, opts ...Option) (*Store, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(start)
	s := New(append([]Option{WithClock(clk.Now)}, opts...)...)
	t.Cleanup(func() { s.Close() })
	return s, clk
}

// maxSweeps is more sweeps than a full pass over every shard takes.
const maxSweeps = 64

// sweepUntilEmpty sweeps s, as its sweeper's ticks would, until it holds no state, and
// fails the test if maxSweeps sweeps leave some. Nothing else may sweep s meanwhile.
func sweepUntilEmpty(t *testing.T, s *Store) {
	t.Helper()
	for i := 0; s.Len() > 0; i++ {
		if i == maxSweeps {
			t.Fatalf("%d keys left after %d sweeps", s.Len(), i)
		}
		s.sweep()
	}
}

func limitsUnderTest() []sluice.Limit {
	var out []sluice.Limit
	for _, a := range store.Algorithms() {
		out = append(out, sluice.Limit{Algorithm: a, Rate: 20, Period: time.Second, Burst: 5})
	}
	return out
}

func TestConcurrentOneKeyAdmitsExactlyTheBound(t *testing.T) {
	ctx := context.Background()
	for _, l := range limitsUnderTest() {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			s, _ := newTestStore(t) // the clock stands still: nothing refills
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < 64; g++ {
				wg.Go(func() {
					for i := 0; i < 50; i++ {
						d, err := s.AllowN(ctx, "hot", l, 1)
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got, want := admitted.Load(), l.MaxCost(); got != want {
				t.Fatalf("admitted %d, want exactly %d", got, want)
			}
		})
	}
}

func TestLookAndDenialSpendNothing(t *testing.T) {
	ctx := context.Background()
	for _, l := range limitsUnderTest() {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			s, clk := newTestStore(t)
			for i := 0; i < 10; i++ {
				d, err := s.AllowN(ctx, "k", l, 0)
				if err != nil || !d.Allowed || d.Remaining != l.MaxCost() {
					t.Fatalf("look %d: %+v %v", i, d, err)
				}
			}
			if s.Len() != 0 {
				t.Fatalf("a look created state: %d keys", s.Len())
			}
			d, _ := s.AllowN(ctx, "k", l, l.MaxCost())
			if !d.Allowed || d.Remaining != 0 {
				t.Fatalf("spending the whole allowance: %+v", d)
			}
			first, _ := s.AllowN(ctx, "k", l, 1)
			if first.Allowed || first.RetryAfter <= 0 {
				t.Fatalf("over the limit: %+v", first)
			}
			for i := 0; i < 5; i++ { // denials at the same instant see the same state
				if d, _ = s.AllowN(ctx, "k", l, 1); d != first {
					t.Fatalf("denial %d: %+v, the first was %+v", i, d, first)
				}
			}
			// Had the denials spent anything, the unit would not fit at the first
			// denial's RetryAfter.
			clk.Advance(first.RetryAfter)
			if d, _ = s.AllowN(ctx, "k", l, 1); !d.Allowed {
				t.Fatalf("at the first denial's RetryAfter, after 5 more denials: %+v", d)
			}
			if err := s.Reset(ctx, "k", l); err != nil {
				t.Fatal(err)
			}
			if d, _ = s.AllowN(ctx, "k", l, l.MaxCost()); !d.Allowed {
				t.Fatalf("after Reset: %+v", d)
			}
		})
	}
}

func TestBadInputIsAnError(t *testing.T) {
	s, _ := newTestStore(t)
	ctx := context.Background()
	ok := sluice.PerSecond(10)
	cases := []struct {
		key   string
		limit sluice.Limit
		n     int64
		want  error
	}{
		{"k", sluice.Limit{Rate: 0, Period: time.Second}, 1, sluice.ErrInvalidLimit},
		{"k", sluice.Limit{Rate: 1, Period: 0}, 1, sluice.ErrInvalidLimit},
		{"k", sluice.Limit{Rate: 1, Period: time.Second, Burst: -1}, 1, sluice.ErrInvalidLimit},
		{"k", sluice.Limit{Algorithm: 99, Rate: 1, Period: time.Second}, 1, sluice.ErrInvalidLimit},
		{"k", sluice.Limit{Rate: 2_000_000, Period: time.Second}, 1, sluice.ErrInvalidLimit}, // T < 1µs
		{"k", ok, -1, sluice.ErrInvalidCost},
		{"k", ok, 11, sluice.ErrCostExceedsLimit},
		{"", ok, 1, sluice.ErrInvalidKey},
		{string(make([]byte, store.MaxKeyLen+1)), ok, 1, sluice.ErrInvalidKey},
	}
	for _, c := range cases {
		if _, err := s.AllowN(ctx, c.key, c.limit, c.n); !errors.Is(err, c.want) {
			t.Errorf("AllowN(%.10q, %v, %d) = %v, want %v", c.key, c.limit, c.n, err, c.want)
		}
	}
}

func TestSweepRemovesIdleKeysOnly(t *testing.T) {
	ctx := context.Background()
	for _, l := range limitsUnderTest() {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			// The test sweeps (s.sweep, one tick of the sweeper); the background
			// sweeper's hour never comes.
			s, clk := newTestStore(t, WithSweepInterval(time.Hour), WithShards(4))
			for i := 0; i < 2000; i++ {
				if _, err := s.AllowN(ctx, fmt.Sprintf("idle-%d", i), l, 1); err != nil {
					t.Fatal(err)
				}
			}
			if s.Len() != 2000 {
				t.Fatalf("holding %d keys, want 2000", s.Len())
			}
			// The active key keeps spending while the idle ones age out; it must never lose
			// its state (which would show as a fresh allowance).
			for i := 0; s.Len() > 1; i++ {
				if i == maxSweeps {
					t.Fatalf("%d keys still held after %d sweeps", s.Len(), i)
				}
				clk.Advance(50 * time.Millisecond)
				if _, err := s.AllowN(ctx, "active", l, 1); err != nil {
					t.Fatal(err)
				}
				s.sweep()
			}
			// Exhaust the active key and check that sweeping keeps its state.
			for {
				d, _ := s.AllowN(ctx, "active", l, 1)
				if !d.Allowed {
					break
				}
			}
			for range maxSweeps {
				s.sweep()
			}
			if d, _ := s.AllowN(ctx, "active", l, 1); d.Allowed {
				t.Fatal("the active key's state was swept")
			}
			if s.Len() != 1 {
				t.Fatalf("holding %d keys, want just the active one", s.Len())
			}
		})
	}
}

func TestMaxKeysEvictsClosestToEmpty(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t, WithMaxKeys(100), WithShards(1), WithSweepInterval(0))
	l := sluice.PerMinute(10)
	for i := 0; i < 1000; i++ {
		if _, err := s.AllowN(ctx, fmt.Sprint("k", i), l, 1+int64(i%3)); err != nil {
			t.Fatal(err)
		}
		if s.Len() > 100 {
			t.Fatalf("%d keys held, cap 100", s.Len())
		}
	}
	// A heavily used key survives a flood of light new keys.
	for i := 0; i < 10; i++ {
		s.AllowN(ctx, "heavy", l, 1)
	}
	for i := 0; i < 1000; i++ {
		s.AllowN(ctx, fmt.Sprint("light", i), l, 1)
	}
	if d, _ := s.AllowN(ctx, "heavy", l, 1); d.Allowed {
		t.Fatal("the exhausted key was evicted in favour of lightly used ones")
	}
}

// TestMaxKeysIsStoreWide: the cap counts every state of every Limit, whichever shard it
// falls in (default shards, so most shards hold one key or none), for AllowN, AllowMulti
// and Reserve, and an exhausted key outlives a flood of light ones from other Limits too.
// (Before eviction was store-wide, a store capped at 100 held 271 keys of one Limit.)
func TestMaxKeysIsStoreWide(t *testing.T) {
	ctx := context.Background()
	const max = 100
	s, _ := newTestStore(t, WithMaxKeys(max), WithSweepInterval(0))
	// Bucket algorithms only: a light key's state then ends (expires) sooner than the heavy
	// key's, whatever its Limit. A window's state lasts to the window's end however light.
	var limits []sluice.Limit
	for _, alg := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		l := sluice.PerMinute(10)
		l.Algorithm = alg
		limits = append(limits, l)
	}
	heavy := limits[0]
	for i := 0; i < 10; i++ {
		s.AllowN(ctx, "heavy", heavy, 1)
	}
	pacer := sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 10, Period: time.Minute}
	for i := 0; i < 3000; i++ {
		k := fmt.Sprint("k", i)
		var err error
		switch i % 3 {
		case 0:
			_, err = s.AllowN(ctx, k, limits[i%len(limits)], 1)
		case 1:
			_, err = sluice.AllowMulti(ctx, s, []sluice.Request{{Key: k, Limit: limits[0], N: 1}, {Key: k, Limit: limits[2], N: 1}})
		default:
			_, err = s.Reserve(ctx, k, pacer, 1)
		}
		if err != nil {
			t.Fatal(err)
		}
		if s.Len() > max {
			t.Fatalf("after %d inserts: %d states held, cap %d", i+1, s.Len(), max)
		}
	}
	if d, _ := s.AllowN(ctx, "heavy", heavy, 1); d.Allowed {
		t.Fatal("the exhausted key was evicted in favour of lightly used ones")
	}
	// Concurrent inserts may pass the cap only while they are in flight.
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := 0; i < 500; i++ {
				s.AllowN(ctx, fmt.Sprint("c", g, "-", i), limits[i%len(limits)], 1)
			}
		})
	}
	wg.Wait()
	if s.Len() > max {
		t.Fatalf("after concurrent inserts: %d states held, cap %d", s.Len(), max)
	}
}

func TestMultiIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t)
	perSec := sluice.Limit{Rate: 10, Period: time.Second}
	perHour := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 15, Period: time.Hour}
	reqs := []sluice.Request{{Key: "api", Limit: perSec, N: 1}, {Key: "api", Limit: perHour, N: 1}}
	admitted := 0
	for i := 0; i < 12; i++ {
		ds, err := sluice.AllowMulti(ctx, s, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if ds[0].Allowed != ds[1].Allowed {
			t.Fatalf("split decision %+v", ds)
		}
		if ds[0].Allowed {
			admitted++
		} else if ds[0].RetryAfter == 0 || ds[1].RetryAfter != 0 {
			t.Fatalf("the per-second limit should block, not the hourly one: %+v", ds)
		}
	}
	if admitted != 10 {
		t.Fatalf("admitted %d, want 10", admitted)
	}
	// The denied calls spent nothing of the hourly limit: 15-10 remain.
	if d, _ := s.AllowN(ctx, "api", perHour, 0); d.Remaining != 5 {
		t.Fatalf("hourly remaining %d, want 5", d.Remaining)
	}
	if _, err := sluice.AllowMulti(ctx, s, []sluice.Request{reqs[0], reqs[0]}); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Fatalf("duplicate request: %v", err)
	}
}

// TestTimeZonesDoNotMatter runs the same traffic across a US daylight-saving change under
// two local time zones: decisions are computed in UTC microseconds, so they are identical.
func TestTimeZonesDoNotMatter(t *testing.T) {
	run := func(zone string) []sluice.Decision {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatalf("time zone %s: %v (install tzdata)", zone, err)
		}
		saved := time.Local
		time.Local = loc
		defer func() { time.Local = saved }()
		s, clk := newTestStore(t, WithSweepInterval(0)) // no goroutine runs while time.Local changes
		rng := rand.New(rand.NewPCG(5, 5))
		var out []sluice.Decision
		for i := 0; i < 3000; i++ {
			clk.Advance(time.Duration(rng.Int64N(int64(3 * time.Second))))
			for _, l := range []sluice.Limit{
				{Algorithm: sluice.FixedWindow, Rate: 50, Period: time.Hour},
				{Algorithm: sluice.SlidingWindow, Rate: 50, Period: time.Hour},
				sluice.PerDay(100),
			} {
				d, err := s.AllowN(context.Background(), "k", l, 1)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, d)
			}
		}
		return out
	}
	a, b := run("America/New_York"), run("Australia/Lord_Howe")
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("decision %d differs across time zones: %+v vs %+v", i, a[i], b[i])
		}
	}
}

func TestNoAllocationsForAnExistingKey(t *testing.T) {
	ctx := context.Background()
	for _, l := range limitsUnderTest() {
		s, _ := newTestStore(t)
		s.AllowN(ctx, "k", l, 1)
		allocs := testing.AllocsPerRun(1000, func() { s.AllowN(ctx, "k", l, 1) })
		if allocs != 0 {
			t.Errorf("%v: %.1f allocations per decision", l.Algorithm, allocs)
		}
	}
	// Two limits used in turn (per-second and per-hour on one key, as layered policies do).
	s, _ := newTestStore(t)
	a, b := sluice.PerSecond(1000), sluice.PerHour(100_000)
	s.AllowN(ctx, "k", a, 1)
	s.AllowN(ctx, "k", b, 1)
	allocs := testing.AllocsPerRun(1000, func() {
		s.AllowN(ctx, "k", a, 1)
		s.AllowN(ctx, "k", b, 1)
	})
	if allocs != 0 {
		t.Errorf("alternating limits: %.1f allocations per pair of decisions", allocs)
	}
}

func TestClosedStoreRefuses(t *testing.T) {
	s := New()
	s.Close()
	s.Close()
	if _, err := s.AllowN(context.Background(), "k", sluice.PerSecond(1), 1); !errors.Is(err, sluice.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestSweepIsInvisibleToABackwardsClock: state swept as expired at a later reading of the
// clock must not turn into fresh quota when the clock steps back; the store decides at the
// latest time it swept at.
func TestSweepIsInvisibleToABackwardsClock(t *testing.T) {
	ctx := context.Background()
	for _, l := range limitsUnderTest() {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			s, clk := newTestStore(t, WithSweepInterval(time.Hour), WithShards(1)) // the test sweeps
			for {
				if d, _ := s.AllowN(ctx, "k", l, 1); !d.Allowed {
					break
				}
			}
			before := clk.Now()
			clk.Advance(time.Hour) // everything expires; the sweeper deletes it
			sweepUntilEmpty(t, s)
			clk.Set(before) // an NTP step back to where the key was exhausted
			d, err := s.AllowN(ctx, "k", l, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Decided at the sweep's time: an hour on, so a full allowance is right; what
			// must not happen is a mix (a fresh state at the old time): ResetAfter then
			// would be measured from the old time.
			if d.Remaining != l.MaxCost() || d.ResetAfter != 0 {
				t.Fatalf("after the step back: %+v", d)
			}
			d, _ = s.AllowN(ctx, "k", l, 1)
			if !d.Allowed {
				t.Fatalf("spend after the step back: %+v", d)
			}
			// The spend is stamped at the sweep's time, an hour after 'before': its state
			// lasts until then plus the period, not just a period after 'before'.
			if d.ResetAfter <= 0 {
				t.Fatalf("no state after spending: %+v", d)
			}
		})
	}
}

// TestClockAtTheEpoch: a clock reading the Unix epoch (or earlier) decides as at its first
// microsecond, so a TokenBucket emptied there is not mistaken for a fresh key, and every
// algorithm still admits exactly its burst.
func TestClockAtTheEpoch(t *testing.T) {
	ctx := context.Background()
	for _, at := range []time.Time{time.Unix(0, 0), time.Unix(-3600, 0)} {
		for _, l := range limitsUnderTest() {
			s := New(WithClock(func() time.Time { return at }), WithSweepInterval(0))
			admitted := int64(0)
			for i := 0; i < 3; i++ {
				if d, err := s.AllowN(ctx, "k", l, l.MaxCost()); err != nil {
					t.Fatal(err)
				} else if d.Allowed {
					admitted++
				}
			}
			s.Close()
			if admitted != 1 {
				t.Errorf("%v at %v: %d requests of the whole burst admitted, want 1", l, at, admitted)
			}
		}
	}
}

// TestIdleLimitsAreReleased: a Limit whose keys have all expired and that goes unused for a
// sweep interval costs the store nothing (its class is dropped); using it again works.
func TestIdleLimitsAreReleased(t *testing.T) {
	ctx := context.Background()
	// The sweeper's ticker never fires within the test (hourly): the test sweeps by hand,
	// as its ticks would.
	s, clk := newTestStore(t, WithSweepInterval(time.Hour))
	for i := 0; i < 500; i++ {
		if _, err := s.AllowN(ctx, "k", sluice.PerSecond(int64(i+1)), 1); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(*s.list.Load()); n != 500 {
		t.Fatalf("%d classes for 500 limits", n)
	}
	clk.Advance(2 * time.Second) // every state has expired
	s.sweep()                    // deletes the states; the classes were used since the last sweep
	if n := len(*s.list.Load()); n != 500 {
		t.Fatalf("%d classes after one sweep; a class used since the previous sweep is kept", n)
	}
	s.sweep() // idle: released
	if n, m := len(*s.list.Load()), len(*s.classes.Load()); n > 0 || m > 0 {
		t.Fatalf("%d classes (%d in the map) left after two sweeps of idle limits", n, m)
	}
	l := sluice.PerMinute(1)
	if d, _ := s.AllowN(ctx, "k", l, 1); !d.Allowed {
		t.Fatalf("a released limit used again: %+v", d)
	}
	if d, _ := s.AllowN(ctx, "k", l, 1); d.Allowed {
		t.Fatalf("its state was not kept: %+v", d)
	}
}

// TestRetirementLosesNoDecision: classes retired over and over while decisions insert
// keys into them: every decision's state is kept (a unit spent is never spent again),
// whichever class it landed in.
func TestRetirementLosesNoDecision(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t, WithSweepInterval(0), WithShards(4))
	limits := []sluice.Limit{sluice.PerHour(3), {Algorithm: sluice.TokenBucket, Rate: 3, Period: time.Hour},
		{Algorithm: sluice.SlidingWindow, Rate: 3, Period: time.Hour}}
	pacer := sluice.Limit{Algorithm: sluice.LeakyBucket, Rate: 3, Period: time.Hour}
	stop := make(chan struct{})
	var retired atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, r := range *s.list.Load() {
				if r.c.retire(func() {}) { // not dropped from the map: lookups must still move on
					retired.Add(1)
				}
				s.retireIdle(r)
			}
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Go(func() {
			for i := 0; i < 2000; i++ {
				l := limits[i%len(limits)]
				k := fmt.Sprint("g", g)
				if d, err := s.AllowN(ctx, k, l, 3); err != nil || !d.Allowed {
					t.Errorf("a fresh key's whole burst: %+v %v", d, err)
					return
				}
				if d, _ := s.AllowN(ctx, k, l, 1); d.Allowed {
					t.Errorf("iteration %d: a unit beyond the burst was allowed: the burst's state was lost", i)
					return
				}
				if err := s.Reset(ctx, k, l); err != nil {
					t.Error(err)
					return
				}
				if _, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: k, Limit: l, N: 3}, {Key: k + "x", Limit: limits[(i+1)%len(limits)], N: 1}}); err != nil {
					t.Error(err)
					return
				}
				if d, _ := s.AllowN(ctx, k, l, 1); d.Allowed {
					t.Errorf("iteration %d: a unit beyond a batch's burst was allowed", i)
					return
				}
				s.Reset(ctx, k, l)
				s.Reset(ctx, k+"x", limits[(i+1)%len(limits)])
				if r, err := s.Reserve(ctx, k, pacer, 3); err != nil || !r.OK || r.Delay != 0 {
					t.Errorf("reserving a fresh key's burst: %+v %v", r, err)
					return
				}
				if d, _ := s.AllowN(ctx, k, pacer, 1); d.Allowed {
					t.Errorf("iteration %d: a unit beyond a reservation's burst was allowed", i)
					return
				}
				s.Reset(ctx, k, pacer)
			}
		})
	}
	wg.Wait()
	close(stop)
	if retired.Load() == 0 {
		t.Fatal("no class was retired: the test raced nothing")
	}
	t.Logf("%d retirements", retired.Load())
}

// TestSameLimitIsEquality checks that sameLimit tells apart two Limits that differ in any
// one field, so that a field added to sluice.Limit cannot be left out of it.
func TestSameLimitIsEquality(t *testing.T) {
	base := sluice.PerCalendar(5, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: mustZone("Europe/Berlin"), Anchor: 3})
	other := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 6, Period: time.Hour, Burst: 7, Lease: time.Second,
		Calendar: sluice.Calendar{Unit: sluice.CalendarDay}}
	if !sameLimit(&base, &base) {
		t.Fatal("a limit differs from itself")
	}
	v, o := reflect.ValueOf(&base).Elem(), reflect.ValueOf(other)
	for i := range v.NumField() {
		c := base
		reflect.ValueOf(&c).Elem().Field(i).Set(o.Field(i))
		if c == base {
			t.Fatalf("field %s: the test's two limits agree on it", v.Type().Field(i).Name)
		}
		if sameLimit(&c, &base) || sameLimit(&base, &c) {
			t.Errorf("sameLimit misses field %s", v.Type().Field(i).Name)
		}
	}
}

// TestDecideRefusesRepeats: a (key, Limit) repeated in one Decide is refused, spending
// nothing, among a few requests or many.
func TestDecideRefusesRepeats(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{3, 9, 40} {
		s, _ := newTestStore(t, WithSweepInterval(0)) // its clock stands still: nothing refills
		reqs := make([]sluice.Request, n)
		for i := range reqs {
			// Same key, a different limit each: no repeat yet.
			reqs[i] = sluice.Request{Key: "k", Limit: sluice.PerSecond(int64(10 + i)), N: 1}
		}
		ds := make([]sluice.Decision, n)
		if _, err := s.Decide(ctx, reqs, ds); err != nil {
			t.Fatalf("%d distinct requests: %v", n, err)
		}
		reqs[n-1].Limit = reqs[1].Limit
		_, err := s.Decide(ctx, reqs, ds)
		if !errors.Is(err, sluice.ErrInvalidKey) || !strings.Contains(err.Error(), fmt.Sprintf("request %d repeats the key and limit of request 1", n-1)) {
			t.Errorf("%d requests, the last repeating the second: %v", n, err)
		}
		if d, _ := s.AllowN(ctx, "k", reqs[0].Limit, 0); d.Remaining != reqs[0].Limit.Rate-1 {
			t.Errorf("%d requests: the refused Decide spent: %d left of %d", n, d.Remaining, reqs[0].Limit.Rate)
		}
	}
}

// mustZone is sluice.ParseZone of a name known to be valid.
func mustZone(name string) sluice.Zone {
	z, err := sluice.ParseZone(name)
	if err != nil {
		panic(err)
	}
	return z
}
