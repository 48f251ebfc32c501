package overload

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a Config.Clock that moves only when told.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newLimiter(t testing.TB, c Config) (*Limiter, *fakeClock) {
	t.Helper()
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC).UnixNano())
	c.Clock = clk.now
	l, err := New(c)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return l, clk
}

func TestParseCriticality(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Criticality
		ok   bool
	}{
		{"critical_plus", Critical, true}, {"CRITICAL", Critical, true}, {"Critical", Critical, true},
		{"default", Default, true}, {"SHEDDABLE_PLUS", Default, true},
		{"sheddable", Sheddable, true}, {"Sheddable", Sheddable, true},
		{"", Default, false}, {"critical ", Default, false}, {"crit", Default, false}, {"\xff", Default, false},
	} {
		got, ok := ParseCriticality(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseCriticality(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	for c, want := range map[Criticality]string{Sheddable: "sheddable", Default: "default", Critical: "critical", 7: "critical", -7: "sheddable"} {
		if got := c.String(); got != want {
			t.Errorf("Criticality(%d).String() = %q, want %q", c, got, want)
		}
		if back, _ := ParseCriticality(c.String()); back != c.valid() {
			t.Errorf("ParseCriticality(%q) = %v, want %v", c.String(), back, c.valid())
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	for name, c := range map[string]Config{
		"negative MinLimit":  {MinLimit: -1},
		"Min above Max":      {MinLimit: 10, MaxLimit: 5},
		"Max above bound":    {MaxLimit: maxLimit + 1},
		"negative Window":    {Window: -time.Second},
		"negative Tolerance": {Tolerance: -1},
		"Tolerance too big":  {Tolerance: 1001},
		"Headroom above Max": {MaxLimit: 10, Headroom: 11},
		"reserves over 100":  {CriticalReserve: 60, DefaultReserve: 41},
		"negative Default":   {DefaultReserve: -1},
		"negative MaxQueue":  {MaxQueue: -1},
		"LongWindow too big": {LongWindow: 1<<20 + 1},
	} {
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", name, err)
		}
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: New() = %v, want ErrInvalidConfig", name, err)
		}
	}
	s, _ := Config{MinLimit: 30}.settings()
	if s.initial != 30 || s.max != DefaultMaxLimit || s.share != [3]int64{80, 80, 100} || s.maxWait != 0 || !s.queue {
		t.Errorf("defaults: %+v", s)
	}
	s, _ = Config{CriticalReserve: -1, MaxWait: -1}.settings()
	if s.share != [3]int64{100, 100, 100} || s.queue {
		t.Errorf("no reserve, no queue: %+v", s)
	}
}

// TestShares: with a limit of 10, 20% reserved for Critical and 30% more for Default,
// Sheddable requests are admitted up to 5 in flight, Default up to 8, Critical up to 10.
func TestShares(t *testing.T) {
	ctx := context.Background()
	l, _ := newLimiter(t, Config{MinLimit: 10, MaxLimit: 10, CriticalReserve: 20, DefaultReserve: 30, MaxWait: -1})
	for _, step := range []struct {
		c    Criticality
		upTo int
	}{{Sheddable, 5}, {Default, 8}, {Critical, 10}} {
		for {
			_, err := l.Acquire(ctx, step.c)
			if err != nil {
				var s *Shed
				if !errors.As(err, &s) || s.Reason != ReasonLimit || s.Criticality != step.c || s.RetryAfter != time.Second {
					t.Fatalf("%v: %v (%+v)", step.c, err, s)
				}
				if want := "overload: " + step.c.String() + " request shed: limit"; err.Error() != want {
					t.Errorf("Error() = %q, want %q", err.Error(), want)
				}
				break
			}
		}
		if got := l.Stats().InFlight; got != step.upTo {
			t.Errorf("%v admitted up to %d in flight, want %d", step.c, got, step.upTo)
		}
	}
}

// TestCtxDoneBeforeAcquire: a request whose context has ended is not admitted.
func TestCtxDoneBeforeAcquire(t *testing.T) {
	l, _ := newLimiter(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.Acquire(ctx, Critical)
	var s *Shed
	if !errors.As(err, &s) || s.Reason != ReasonCanceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v", err)
	}
	if st := l.Stats(); st.InFlight != 0 {
		t.Errorf("Stats: %+v", st)
	}
}

func TestPermitEndsOnce(t *testing.T) {
	l, _ := newLimiter(t, Config{MinLimit: 2, MaxLimit: 2})
	a, _ := l.Acquire(context.Background(), Critical)
	b, _ := l.Acquire(context.Background(), Critical)
	a.Release()
	a.Release()
	a.Drop()
	var none *Permit
	none.Release()
	if got := l.Stats().InFlight; got != 1 {
		t.Fatalf("in flight %d after ending one permit three times, want 1", got)
	}
	b.Drop()
	if got := l.Stats().InFlight; got != 0 {
		t.Fatalf("in flight %d, want 0", got)
	}
}
