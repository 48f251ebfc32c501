package memory

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestMaxReservations: WithMaxReservations bounds the settlement records; a decision
// allowed at the bound is still decided, but its settlement finds no record and its
// estimate stands, counted; records past their TTL make room again (issue 39, item 5: a
// client making allowed decisions grew them until their TTLs).
func TestMaxReservations(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := New(WithClock(func() time.Time { return now }), WithMaxReservations(2), WithSweepInterval(0))
	defer s.Close()
	tokens := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1000, Period: time.Hour}
	decide := func(key string) sluice.Decision {
		t.Helper()
		d := make([]sluice.Decision, 1)
		if _, err := s.Decide(ctx, []sluice.Request{{Key: key, Limit: tokens, N: 10, SettleTTL: time.Minute}}, d); err != nil || !d[0].Allowed {
			t.Fatalf("%s: %+v, %v", key, d[0], err)
		}
		return d[0]
	}
	a, b, c := decide("a"), decide("b"), decide("c")
	if s.Reservations() != 2 || s.ReservationsDropped() != 1 {
		t.Fatalf("%d records, %d dropped; want 2 and 1", s.Reservations(), s.ReservationsDropped())
	}
	if _, err := s.Settle(ctx, "c", tokens, c.Reservation, 1); !errors.Is(err, sluice.ErrUnknownReservation) {
		t.Errorf("settling the decision over the bound: %v, want ErrUnknownReservation", err)
	}
	for _, d := range []struct {
		key string
		d   sluice.Decision
	}{{"a", a}, {"b", b}} {
		if after, err := s.Settle(ctx, d.key, tokens, d.d.Reservation, 1); err != nil || after.Remaining != 999 {
			t.Errorf("settling %s within the bound: %+v, %v", d.key, after, err)
		}
	}
	now = now.Add(2 * time.Minute)
	s.sweep()
	if s.Reservations() != 0 {
		t.Fatalf("%d records past their TTL after a sweep", s.Reservations())
	}
	d := decide("d")
	if _, err := s.Settle(ctx, "d", tokens, d.Reservation, 1); err != nil {
		t.Errorf("settling after the sweep made room: %v", err)
	}
}
