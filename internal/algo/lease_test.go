package algo

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// TestConcurrency: Rate leases at most; a denial's RetryAfter is the oldest lease's
// expiry; a release or an expiry frees a slot; a release of an unknown, released or
// expired lease reports false and changes nothing.
func TestConcurrency(t *testing.T) {
	p := ParamsOf(sluice.InFlight(2, 100*time.Microsecond))
	var l Leases
	if r := Concurrency(&l, 1000, p, 1, 7, true); !r.Allowed || r.Remaining != 1 || r.ResetAfter != 100 {
		t.Fatalf("first: %+v", r)
	}
	if r := Concurrency(&l, 1030, p, 1, 8, true); !r.Allowed || r.Remaining != 0 || r.ResetAfter != 100 {
		t.Fatalf("second: %+v", r)
	}
	if r := Concurrency(&l, 1040, p, 1, 9, true); r.Allowed || r.RetryAfter != 60 || r.ResetAfter != 90 {
		t.Fatalf("third: %+v", r)
	}
	if r := Concurrency(&l, 1040, p, 0, 0, false); r.Allowed || r.Remaining != 0 {
		t.Fatalf("look when full: %+v", r)
	}
	for _, id := range []uint64{9, 123} {
		if Release(&l, 1040, id) || l.Len() != 2 {
			t.Fatalf("release of unknown %d: held %d", id, l.Len())
		}
	}
	if !Release(&l, 1040, 8) || Release(&l, 1040, 8) || l.Len() != 1 {
		t.Fatalf("release of 8 twice: held %d", l.Len())
	}
	if r := Concurrency(&l, 1050, p, 1, 10, true); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("after release: %+v", r)
	}
	// Lease 7 expires at 1100: its slot frees by itself, and its release is then false.
	if Release(&l, 1100, 7) {
		t.Fatal("released an expired lease")
	}
	if r := Concurrency(&l, 1100, p, 1, 11, true); !r.Allowed || r.Remaining != 0 || r.ResetAfter != 100 {
		t.Fatalf("after expiry: %+v", r)
	}
	// A clock stepped back frees nothing early.
	if r := Concurrency(&l, 900, p, 1, 12, true); r.Allowed || r.RetryAfter != 250 {
		t.Fatalf("clock back: %+v", r)
	}
}
