package sluice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// TestKindOf: the classes of the sentinel errors, of context errors and of a store's own
// classification, whatever wraps them; the kinds KindOf gives are package store's.
func TestKindOf(t *testing.T) {
	busy := &sluice.StoreError{Kind: store.KindBusy, Err: errors.New("BUSY")}
	tests := []struct {
		err  error
		want sluice.ErrorKind
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", sluice.ErrInvalidLimit), store.KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrInvalidCost), store.KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrCostExceedsLimit), store.KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrInvalidKey), store.KindBadInput},
		{fmt.Errorf("x: %w", sluice.ErrClosed), store.KindClosed},
		{fmt.Errorf("x: %w", context.Canceled), store.KindCanceled},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), store.KindTimeout},
		{fmt.Errorf("%w: %w", sluice.ErrStoreUnavailable, busy), store.KindBusy},
		{errors.Join(errors.New("a"), busy), store.KindBusy},
		{errors.New("something else"), store.KindOther},
	}
	for _, tt := range tests {
		if got := sluice.KindOf(tt.err); got != tt.want {
			t.Errorf("KindOf(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestFailureMode: parsing and Or.
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
	got := sluice.Failure{Mode: sluice.FailLocal}.Or(sluice.Failure{Mode: sluice.FailOpen, Share: 0.5})
	if got != (sluice.Failure{Mode: sluice.FailLocal, Share: 0.5}) {
		t.Errorf("Or: %+v", got)
	}
}
