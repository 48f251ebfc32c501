package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// TestIsFailure: the kinds a failure mode absorbs are the store failures.
func TestIsFailure(t *testing.T) {
	for _, k := range []sluice.ErrorKind{"", store.KindBadInput, store.KindCanceled, store.KindClosed} {
		if store.IsFailure(k) {
			t.Errorf("IsFailure(%q) = true", k)
		}
	}
	for _, k := range []sluice.ErrorKind{store.KindTimeout, store.KindRefused, store.KindOOM, store.KindBreakerOpen, store.KindOther} {
		if !store.IsFailure(k) {
			t.Errorf("IsFailure(%q) = false", k)
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
	classified := &sluice.StoreError{Kind: store.KindCanceled, Err: canceled}
	timeout := fmt.Errorf("store: %w", context.DeadlineExceeded)
	busy := &sluice.StoreError{Kind: store.KindBusy, Err: errors.New("BUSY")}
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
			got := store.ForeignCancel(tt.ctx, tt.err)
			if !tt.foreign {
				if got != tt.err {
					t.Errorf("ForeignCancel(%v) = %v, want it unchanged", tt.err, got)
				}
				return
			}
			if k := sluice.KindOf(got); k != store.KindRefused {
				t.Errorf("ForeignCancel(%v) is of kind %q, want %q", tt.err, k, store.KindRefused)
			}
			if errors.Is(got, context.Canceled) {
				t.Errorf("ForeignCancel(%v) = %v still matches context.Canceled", tt.err, got)
			}
		})
	}
}
