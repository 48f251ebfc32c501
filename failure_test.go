package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestKindOf: the classes of the sentinel errors, of context errors and of a store's own
// classification, whatever wraps them.
func TestKindOf(t *testing.T) {
	busy := &sluice.StoreError{Kind: sluice.KindBusy, Err: errors.New("BUSY")}
	tests := []struct {
		err  error
		want sluice.ErrorKind
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", sluice.ErrInvalidLimit), sluice.KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrInvalidCost), sluice.KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrCostExceedsLimit), sluice.KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrInvalidKey), sluice.KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrClosed), sluice.KindClosed},
		{fmt.Errorf("x: %w", context.Canceled), sluice.KindCanceled},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), sluice.KindTimeout},
		{fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, busy), sluice.KindBusy},
		{errors.Join(errors.New("a"), busy), sluice.KindBusy},
		{errors.New("something else"), sluice.KindOther},
	}
	for _, tt := range tests {
		if got := sluice.KindOf(tt.err); got != tt.want {
			t.Errorf("KindOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
	for _, k := range []sluice.ErrorKind{"", sluice.KindBadInput, sluice.KindCanceled, sluice.KindClosed} {
		if k.IsFailure() {
			t.Errorf("%q.IsFailure() = true", k)
		}
	}
	for _, k := range []sluice.ErrorKind{sluice.KindTimeout, sluice.KindRefused, sluice.KindOOM, sluice.KindBreakerOpen, sluice.KindOther} {
		if !k.IsFailure() {
			t.Errorf("%q.IsFailure() = false", k)
		}
	}
}

// TestForeignCancel: a cancellation that reaches a call whose context is live is a store
// failure that no longer reads as context.Canceled; the caller's own cancellation, and
// every other error, stay as they are.
func TestForeignCancel(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	canceled := fmt.Errorf("store: dial: %w", context.Canceled)
	classified := &sluice.StoreError{Kind: sluice.KindCanceled, Err: canceled}
	timeout := fmt.Errorf("store: %w", context.DeadlineExceeded)
	busy := &sluice.StoreError{Kind: sluice.KindBusy, Err: errors.New("BUSY")}
	tests := []struct {
		name    string
		ctx     context.Context
		err     error
		foreign bool // want a store failure of KindRefused
	}{
		{"nil", live, nil, false},
		{"live, canceled", live, canceled, true},
		{"live, canceled classified by a store", live, classified, true},
		{"live, deadline (a store timeout already)", live, timeout, false},
		{"live, busy", live, busy, false},
		{"live, bad input", live, fmt.Errorf("x: %w", sluice.ErrInvalidKey), false},
		{"caller's own cancellation", gone, canceled, false},
		{"caller's own, classified", gone, classified, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sluice.ForeignCancel(tt.ctx, tt.err)
			if !tt.foreign {
				if got != tt.err {
					t.Errorf("ForeignCancel(%v) = %v, want it unchanged", tt.err, got)
				}
				return
			}
			if k := sluice.KindOf(got); k != sluice.KindRefused {
				t.Errorf("ForeignCancel(%v) is of kind %q, want %q", tt.err, k, sluice.KindRefused)
			}
			if errors.Is(got, context.Canceled) {
				t.Errorf("ForeignCancel(%v) = %v still matches context.Canceled", tt.err, got)
			}
		})
	}
}

// TestFailureMode: parsing, the Path of each mode, strictness and Or.
func TestFailureMode(t *testing.T) {
	for in, want := range map[string]sluice.FailureMode{
		"": sluice.FailInherit, "inherit": sluice.FailInherit, "open": sluice.FailOpen, "FAIL_OPEN": sluice.FailOpen,
		"closed": sluice.FailClosed, "close": sluice.FailClosed, "fail-closed": sluice.FailClosed, " local ": sluice.FailLocal,
	} {
		if got, err := sluice.ParseFailureMode(in); err != nil || got != want {
			t.Errorf("ParseFailureMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := sluice.ParseFailureMode("sometimes"); err == nil {
		t.Error("ParseFailureMode(sometimes): no error")
	}
	paths := map[sluice.FailureMode]sluice.Path{sluice.FailInherit: sluice.PathStore, sluice.FailOpen: sluice.PathOpen,
		sluice.FailClosed: sluice.PathClosed, sluice.FailLocal: sluice.PathLocal}
	for m, p := range paths {
		if m.Path() != p {
			t.Errorf("%v.Path() = %v, want %v", m, m.Path(), p)
		}
	}
	if !(sluice.FailClosed.Strictness() > sluice.FailLocal.Strictness() && sluice.FailLocal.Strictness() > sluice.FailOpen.Strictness() &&
		sluice.FailOpen.Strictness() > sluice.FailInherit.Strictness()) {
		t.Error("strictness is not closed > local > open > inherit")
	}
	got := sluice.Failure{Mode: sluice.FailLocal}.Or(sluice.Failure{Mode: sluice.FailOpen, Share: 0.5})
	if got != (sluice.Failure{Mode: sluice.FailLocal, Share: 0.5}) {
		t.Errorf("Or: %+v", got)
	}
	var m sluice.FailureMode
	if err := m.UnmarshalText([]byte("closed")); err != nil || m != sluice.FailClosed {
		t.Errorf("UnmarshalText: %v %v", m, err)
	}
	if b, err := sluice.FailLocal.MarshalText(); err != nil || string(b) != "local" {
		t.Errorf("MarshalText: %s %v", b, err)
	}
}

// TestFillTime: Burst·Period/Rate rounded up to a µs for the buckets, Period for windows.
func TestFillTime(t *testing.T) {
	tests := []struct {
		l    sluice.Limit
		want time.Duration
	}{
		{sluice.PerSecond(10), time.Second},
		{sluice.PerSecond(10).WithBurst(25), 2500 * time.Millisecond},
		{sluice.PerSecond(3), time.Second},
		{sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 3, Period: time.Second, Burst: 1}, 333334 * time.Microsecond},
		{sluice.PerMinute(7).With(sluice.FixedWindow).WithBurst(100), time.Minute},
		{sluice.Limit{}, 0},
	}
	for _, tt := range tests {
		if got := tt.l.FillTime(); got != tt.want {
			t.Errorf("%v.FillTime() = %v, want %v", tt.l, got, tt.want)
		}
	}
}
