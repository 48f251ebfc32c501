package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// calendarLimits are calendar quotas in zones whose period starts break naive arithmetic.
var calendarLimits = []sluice.Limit{
	sluice.PerCalendar(3, sluice.Calendar{Unit: sluice.CalendarDay, Zone: mustZone("America/New_York")}),
	sluice.PerCalendar(5, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: mustZone("Europe/Berlin"), Anchor: 31}),
	sluice.PerCalendar(4, sluice.Calendar{Unit: sluice.CalendarWeek, Zone: mustZone("Pacific/Kiritimati")}),
	sluice.PerCalendar(2, sluice.Calendar{Unit: sluice.CalendarYear}),
	sluice.PerCalendar(7, sluice.Calendar{Unit: sluice.CalendarMonth, Anchor: 29}),
}

// TestDifferentialCalendar holds the Redis store to the memory store on calendar limits:
// random costs, multi-limit requests mixed with a plain fixed window, resets, and a clock
// that jumps to period starts (and 1 µs either side), across DST changes, 29 February and
// month ends, sometimes backwards.
func TestDifferentialCalendar(t *testing.T) {
	t.Parallel()
	clock, mem, red := pairedStores(t)
	clock.Set(time.Date(2027, 12, 20, 0, 0, 0, 0, time.UTC))
	limits := append(append([]sluice.Limit{}, calendarLimits...), sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour})
	var lanes []*lane
	for i := 0; i < 8; i++ {
		lanes = append(lanes, &lane{
			name:   fmt.Sprintf("calendar/lane%d", i),
			rng:    rand.New(rand.NewPCG(uint64(i), 0xca1)),
			limits: limits,
			keys:   []string{fmt.Sprintf("C%d:k0", i), fmt.Sprintf("C%d:k1", i)},
		})
	}
	rng := rand.New(rand.NewPCG(7, 7))
	ctx := context.Background()
	leapFebs := 0
	for i := 0; i < 3000; i++ {
		now := clock.Now()
		if now.Year() > 2029 { // stay well inside Lua's exact range; a big step back too
			clock.Set(time.Date(2027, 12, 20, 0, 0, 0, 0, time.UTC))
			leapFebs++
		}
		switch p := rng.IntN(100); {
		case p < 40: // to a period start of one of the limits, or 1µs either side
			l := calendarLimits[rng.IntN(len(calendarLimits))]
			_, end := l.Calendar.Bounds(now)
			clock.Set(end.Add(time.Duration(rng.IntN(3)-1) * time.Microsecond))
		case p < 45:
			clock.Advance(-time.Duration(rng.IntN(3600)) * time.Second)
		case p < 60:
			clock.Advance(0)
		default:
			clock.Advance(time.Duration(rng.Int64N(int64(6 * time.Hour))))
		}
		stepLanes(ctx, lanes, i, clock.Micros(), mem, red)
	}
	reportLanes(t, lanes)
	if leapFebs == 0 {
		t.Fatalf("the clock reached only %v: the test did not cross a leap February", clock.Now())
	}
}

// TestCalendarResetRunsToPeriodStart decides on both stores at instants around DST changes
// and month ends and checks that RetryAfter and ResetAfter run exactly to the next period
// start and Window is the period's length.
func TestCalendarResetRunsToPeriodStart(t *testing.T) {
	t.Parallel()
	clock, mem, red := pairedStores(t)
	ny, _ := time.LoadLocation("America/New_York")
	berlin, _ := time.LoadLocation("Europe/Berlin")
	kiri, _ := time.LoadLocation("Pacific/Kiritimati")
	cases := []struct {
		limit  sluice.Limit
		at     time.Time
		end    time.Time
		window time.Duration
	}{
		{calendarLimits[0], time.Date(2026, 3, 8, 1, 30, 0, 0, ny), time.Date(2026, 3, 9, 0, 0, 0, 0, ny), 23 * time.Hour},
		{calendarLimits[0], time.Date(2026, 11, 1, 1, 30, 0, 0, ny), time.Date(2026, 11, 2, 0, 0, 0, 0, ny), 25 * time.Hour},
		{calendarLimits[1], time.Date(2026, 3, 30, 12, 0, 0, 0, berlin), time.Date(2026, 3, 31, 0, 0, 0, 0, berlin), 31*24*time.Hour - time.Hour},
		{calendarLimits[1], time.Date(2028, 2, 29, 12, 0, 0, 0, berlin), time.Date(2028, 3, 31, 0, 0, 0, 0, berlin), 31*24*time.Hour - time.Hour},
		{calendarLimits[2], time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC), time.Date(2026, 12, 7, 0, 0, 0, 0, kiri), 7 * 24 * time.Hour},
	}
	ctx := context.Background()
	for i, c := range cases {
		clock.Set(c.at)
		key := fmt.Sprintf("reset%d", i)
		for _, st := range []sluice.Limiter{mem, red} {
			for n := int64(0); n < c.limit.Rate; n++ {
				if d, err := sluice.AllowN(ctx, st, key, c.limit, 1); err != nil || !d.Allowed {
					t.Fatalf("case %d %T: unit %d: %+v, %v", i, st, n, d, err)
				}
			}
			d, err := sluice.AllowN(ctx, st, key, c.limit, 1)
			want := c.end.Sub(c.at)
			if err != nil || d.Allowed || d.RetryAfter != want || d.ResetAfter != want || d.Window != c.window {
				t.Fatalf("case %d %T at %v: %+v, %v; want RetryAfter = ResetAfter = %v, Window %v", i, st, c.at, d, err, want, c.window)
			}
		}
		clock.Set(c.end.Add(-time.Microsecond))
		for _, st := range []sluice.Limiter{mem, red} {
			if d, _ := sluice.AllowN(ctx, st, key, c.limit, 1); d.Allowed {
				t.Fatalf("case %d %T: allowed 1µs before the period start", i, st)
			}
		}
		clock.Set(c.end)
		for _, st := range []sluice.Limiter{mem, red} {
			if d, _ := sluice.AllowN(ctx, st, key, c.limit, 1); !d.Allowed || d.Remaining != c.limit.Rate-1 {
				t.Fatalf("case %d %T: at the period start %+v", i, st, d)
			}
		}
	}
}

// TestCalendarServerClock decides a calendar quota on Redis's own clock (no WithClock):
// the bounds computed around the local clock hold the server's now, and the decision runs
// to the next UTC midnight.
func TestCalendarServerClock(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	red := open(t, srv.URL())
	l := sluice.PerCalendar(2, sluice.Calendar{Unit: sluice.CalendarDay})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if d, err := red.AllowN(ctx, "srv", l, 1); err != nil || !d.Allowed {
			t.Fatalf("unit %d: %+v, %v", i, d, err)
		}
	}
	d, err := red.AllowN(ctx, "srv", l, 1)
	// Redis's clock decides (the point of the test), which no test sets: the wait is
	// compared with this machine's clock with 1s of slack for the round trip.
	_, end := l.Calendar.Bounds(time.Now())
	if want := time.Until(end); err != nil || d.Allowed || d.RetryAfter > want+time.Second || d.RetryAfter < want-time.Second || d.Window != 24*time.Hour {
		t.Fatalf("%+v, %v; want a denial until about %v in a 24h window", d, err, want)
	}
	// A multi-limit request on a cluster-free store takes the same path.
	ds, err := sluice.AllowMulti(ctx, red, []sluice.Request{{Key: "srv2", Limit: l, N: 1}, {Key: "srv2", Limit: sluice.PerSecond(5), N: 1}})
	if err != nil || !ds[0].Allowed || ds[0].Window != 24*time.Hour {
		t.Fatalf("%+v, %v", ds, err)
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
