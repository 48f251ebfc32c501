package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// TestBounds: each bound this package names is the one the root package enforces: a
// value at the bound passes, one past it is an error of bad input.
func TestBounds(t *testing.T) {
	tests := []struct {
		name     string
		at, past error
	}{
		{"MaxPeriod",
			sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: store.MaxPeriod}.Validate(),
			sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: store.MaxPeriod + time.Microsecond}.Validate()},
		{"MaxRate",
			sluice.Limit{Algorithm: sluice.FixedWindow, Rate: store.MaxRate, Period: time.Hour}.Validate(),
			sluice.Limit{Algorithm: sluice.FixedWindow, Rate: store.MaxRate + 1, Period: time.Hour}.Validate()},
		{"MaxLogRate",
			sluice.Limit{Algorithm: sluice.SlidingLog, Rate: store.MaxLogRate, Period: time.Hour}.Validate(),
			sluice.Limit{Algorithm: sluice.SlidingLog, Rate: store.MaxLogRate + 1, Period: time.Hour}.Validate()},
		{"MaxLogRate of Concurrency",
			sluice.InFlight(store.MaxLogRate, time.Second).Validate(),
			sluice.InFlight(store.MaxLogRate+1, time.Second).Validate()},
		{"MaxLease",
			sluice.InFlight(1, store.MaxLease).Validate(),
			sluice.InFlight(1, store.MaxLease+time.Millisecond).Validate()},
		{"MaxKeyLen",
			store.CheckKey(strings.Repeat("k", store.MaxKeyLen)),
			store.CheckKey(strings.Repeat("k", store.MaxKeyLen+1))},
		{"MaxSettleTTL",
			store.CheckSettleTTL(sluice.PerSecond(1), store.MaxSettleTTL),
			store.CheckSettleTTL(sluice.PerSecond(1), store.MaxSettleTTL+time.Nanosecond)},
		{"MaxLeaseID",
			store.CheckRelease("k", sluice.InFlight(1, time.Second), store.MaxLeaseID),
			store.CheckRelease("k", sluice.InFlight(1, time.Second), store.MaxLeaseID+1)},
	}
	for _, tt := range tests {
		if tt.at != nil {
			t.Errorf("%s: at the bound: %v", tt.name, tt.at)
		}
		if !store.IsBadInput(tt.past) {
			t.Errorf("%s: past the bound: %v, want bad input", tt.name, tt.past)
		}
	}
	for _, k := range []string{"", "k", strings.Repeat("k", store.MaxKeyLen), strings.Repeat("k", store.MaxKeyLen+1)} {
		if ok, err := store.ValidKey(k), store.CheckKey(k); ok != (err == nil) {
			t.Errorf("key of %d bytes: ValidKey %v, CheckKey %v", len(k), ok, err)
		}
	}
	var id sluice.LeaseID
	if err := id.UnmarshalText([]byte(sluice.LeaseID(store.MaxLeaseID).String())); err != nil {
		t.Errorf("MaxLeaseID does not read back: %v", err)
	}
	if err := id.UnmarshalText([]byte(sluice.LeaseID(store.MaxLeaseID + 1).String())); !errors.Is(err, sluice.ErrInvalidLease) {
		t.Errorf("MaxLeaseID+1 reads back: %v", err)
	}
}

// TestEffectiveBurst: Burst for the buckets when set, else Rate.
func TestEffectiveBurst(t *testing.T) {
	for _, tt := range []struct {
		l    sluice.Limit
		want int64
	}{
		{sluice.PerSecond(10), 10},
		{sluice.PerSecond(10).WithBurst(25), 25},
		{sluice.PerSecond(10).With(sluice.TokenBucket).WithBurst(3), 3},
		{sluice.PerSecond(10).With(sluice.FixedWindow).WithBurst(25), 10},
		{sluice.InFlight(4, time.Second), 4},
	} {
		if got := store.EffectiveBurst(tt.l); got != tt.want {
			t.Errorf("EffectiveBurst(%v) = %d, want %d", tt.l, got, tt.want)
		}
	}
}
