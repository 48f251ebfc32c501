package poll

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type recorder struct{ msg string }

func (*recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.msg = fmt.Sprintf(format, args...) }

// TestUntilReturnsWhenTheConditionHolds: Until returns once another goroutine makes the
// condition true, without failing.
func TestUntilReturnsWhenTheConditionHolds(t *testing.T) {
	var set atomic.Bool
	go set.Store(true)
	r := &recorder{}
	Until(r, 10*time.Second, "the flag", set.Load)
	if r.msg != "" || !set.Load() {
		t.Fatalf("Until returned with the flag %v, failure %q", set.Load(), r.msg)
	}
}

// TestUntilFailsNamingWhatAndTheState: a condition that never holds fails the test with
// what was awaited and describe's account.
func TestUntilFailsNamingWhatAndTheState(t *testing.T) {
	r := &recorder{}
	calls := 0
	UntilDescribed(r, 0, "the impossible", func() bool { calls++; return calls > 1<<30 }, func() string { return "still false" })
	if !strings.Contains(r.msg, "the impossible") || !strings.Contains(r.msg, "still false") {
		t.Fatalf("failure %q, want it to name what and the state", r.msg)
	}
}
