package failover

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

// TestLeasesAndSettlements: through failover, a lease and a reservation the store made are
// released and settled in the store; while the store is down a release or a settlement
// is an error wrapping ErrStoreUnavailable (the lease expires, the estimate stands); and
// a lease or reservation a FailLocal decision made in the local limiter is released or
// settled there, once the store is back too.
func TestLeasesAndSettlements(t *testing.T) {
	ctx := context.Background()
	faulty := newFaultyStore(t)
	// tokens is an hour's fixed window: the local store's clock stands mid-hour, so the
	// window cannot end during the test.
	local := memory.New(memory.WithClock(clocktest.New(time.Date(2025, 6, 1, 12, 30, 0, 0, time.UTC)).Now))
	defer local.Close()
	l := newLimiter(t, faulty, WithLocalLimiter(local), WithDefault(sluice.Failure{Mode: sluice.FailLocal}))
	inflight := sluice.InFlight(1, time.Hour)
	tokens := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 100, Period: time.Hour}
	down := storeErr(store.KindLoading, "LOADING Redis is loading the dataset in memory")

	d, _, err := decideOne(ctx, l, sluice.Request{Key: "k", Limit: inflight, N: 1})
	if err != nil || !d.Allowed || d.Path != sluice.PathStore || d.Lease == 0 {
		t.Fatalf("store's lease: %+v, %v", d, err)
	}
	faulty.setFail(down)
	if held, err := l.Release(ctx, "k", inflight, d.Lease); held || !errors.Is(err, sluice.ErrStoreUnavailable) {
		t.Fatalf("release while the store is down: %v, %v", held, err)
	}
	ld, _, err := decideOne(ctx, l, sluice.Request{Key: "k", Limit: inflight, N: 1})
	if err != nil || !ld.Allowed || ld.Path != sluice.PathLocal || ld.Lease == 0 {
		t.Fatalf("local lease: %+v, %v", ld, err)
	}
	r, _, err := decideOne(ctx, l, sluice.Request{Key: "k", Limit: tokens, N: 30, SettleTTL: time.Minute})
	if err != nil || r.Path != sluice.PathLocal || r.Reservation == 0 {
		t.Fatalf("local reservation: %+v, %v", r, err)
	}
	faulty.setFail(nil)
	if held, err := l.Release(ctx, "k", inflight, ld.Lease); !held || err != nil {
		t.Fatalf("release of the local lease: %v, %v", held, err)
	}
	if s, err := l.Settle(ctx, "k", tokens, r.Reservation, 10); err != nil || s.Remaining != 90 || s.Path != sluice.PathLocal {
		t.Fatalf("settlement of the local reservation: %+v, %v", s, err)
	}
	if held, err := l.Release(ctx, "k", inflight, d.Lease); !held || err != nil {
		t.Fatalf("release of the store's lease once it is back: %v, %v", held, err)
	}
	if _, err := l.Settle(ctx, "k", tokens, r.Reservation, 10); !errors.Is(err, sluice.ErrSettled) {
		t.Fatalf("second settlement: %v", err)
	}
	if _, err := l.Settle(ctx, "k", tokens, sluice.ReservationID(99), -1); !errors.Is(err, sluice.ErrInvalidCost) {
		t.Fatalf("negative cost: %v", err)
	}
}
