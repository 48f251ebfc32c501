package headroom

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live, roots, headroom int64
		want                  int
	}{
		{10 * mib, 0, 0, 100},              // no headroom: Go's default
		{10 * mib, 0, -1, 100},             // nor a negative one
		{10 * mib, 0, 64 * mib, 640},       // a small heap grows by the headroom
		{10 * mib, 6 * mib, 64 * mib, 400}, // stacks and globals count towards the goal
		{10*mib + 1, 0, 64 * mib, 640},     // rounded up: never less than the headroom
		{0, 0, 64 * mib, 1600},             // before the first collection: the runtime's minimum
		{1 * mib, 0, 64 * mib, 1625},       // the minimum decides below 4 MiB, live included
		{64 * mib, 0, 64 * mib, 100},       // the share of the live heap is as large
		{1 << 30, 0, 64 * mib, 100},        // and larger: Go's pacing
		{0, 0, 1 << 50, maxPercent},        // bounded
	} {
		if got := Percent(c.live, c.roots, c.headroom); got != c.want {
			t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.roots, c.headroom, got, c.want)
		}
		// The contract: the runtime's goal at that percent is at least live + headroom.
		if c.headroom > 0 && c.want < maxPercent {
			p := int64(Percent(c.live, c.roots, c.headroom))
			goal := max(c.live+(c.live+c.roots)*p/100, minHeap*p/100)
			if goal < c.live+c.headroom {
				t.Errorf("Percent(%d, %d, %d) = %d: goal %d", c.live, c.roots, c.headroom, p, goal)
			}
		}
	}
}

// read returns the named runtime metrics.
func read(names ...string) []int64 {
	s := make([]metrics.Sample, len(names))
	for i, n := range names {
		s[i].Name = n
	}
	metrics.Read(s)
	v := make([]int64, len(s))
	for i := range s {
		v[i] = int64(s[i].Value.Uint64())
	}
	return v
}

func gcPercent() int { return int(read("/gc/gogc:percent")[0]) }

// collectAndFinalize runs a collection and returns once every finalizer it queued (the
// hook's among them) has run. The one finalizer goroutine takes the whole queue at once and
// runs it before taking the next: when a sentinel queued by a second collection has run,
// the first collection's batch is done; a third makes sure even if the first two were taken
// as one batch.
func collectAndFinalize() {
	runtime.GC()
	for range 2 {
		done := make(chan struct{})
		runtime.SetFinalizer(new([64]byte), func(*[64]byte) { close(done) })
		runtime.GC()
		<-done
	}
}

// settled collects until the hook has set the percent the last collection's figures
// call for, and returns the heap goal and the live heap of that collection.
func settled(t *testing.T, headroom int64) (goal, live int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		collectAndFinalize()
		v := read("/gc/heap/live:bytes", "/gc/scan/stack:bytes", "/gc/scan/globals:bytes", "/gc/heap/goal:bytes")
		if gcPercent() == Percent(v[0], v[1]+v[2], headroom) {
			return v[3], v[0]
		}
	}
	t.Fatalf("the GC percent is %d ten seconds on, not what the last collection calls for", gcPercent())
	return 0, 0
}

// TestStartPacesByTheHeadroom: with a headroom, the runtime's heap goal after each
// collection is at least the live heap plus the headroom, and follows the live heap:
// when as much is live as the headroom, the pacing is Go's own (100%); when it is freed,
// the headroom applies again. stop restores the percent there was.
func TestStartPacesByTheHeadroom(t *testing.T) {
	t.Setenv("GOGC", "")
	before := gcPercent()
	const headroom = 48 << 20
	stop := Start(headroom)
	t.Cleanup(stop)
	goal, live := settled(t, headroom)
	if gcPercent() <= 100 {
		t.Errorf("GC percent %d with %d bytes live: the headroom did not raise it", gcPercent(), live)
	}
	if goal < live+headroom {
		t.Errorf("heap goal %d, want at least live %d + headroom %d", goal, live, headroom)
	}

	big := make([]byte, 96<<20) // live twice the headroom
	for i := range big {
		big[i] = byte(i)
	}
	settled(t, headroom)
	if p := gcPercent(); p != 100 {
		t.Errorf("GC percent %d with 96 MiB live, want Go's 100", p)
	}
	runtime.KeepAlive(big)
	big = nil

	goal, live = settled(t, headroom)
	if gcPercent() <= 100 || goal < live+headroom {
		t.Errorf("after freeing: GC percent %d, goal %d, live %d: the headroom is not back", gcPercent(), goal, live)
	}
	stop()
	if p := gcPercent(); p != before {
		t.Errorf("after stop: GC percent %d, want %d as before Start", p, before)
	}
	collectAndFinalize()
	if p := gcPercent(); p != before {
		t.Errorf("a collection after stop set the GC percent to %d", p)
	}
}

// TestStartLeavesAnOperatorsChoice: with GOGC in the environment, or no headroom, Start
// changes nothing.
func TestStartLeavesAnOperatorsChoice(t *testing.T) {
	prev := debug.SetGCPercent(70)
	defer debug.SetGCPercent(prev)
	for _, c := range []struct {
		env      string
		headroom int64
	}{{"70", 64 << 20}, {"", 0}, {"off", 64 << 20}} {
		t.Setenv("GOGC", c.env)
		stop := Start(c.headroom)
		collectAndFinalize()
		if p := gcPercent(); p != 70 {
			t.Errorf("GOGC=%q, headroom %d: GC percent %d, want 70 left as it was", c.env, c.headroom, p)
		}
		stop()
		if p := gcPercent(); p != 70 {
			t.Errorf("GOGC=%q, headroom %d: stop set the GC percent to %d", c.env, c.headroom, p)
		}
	}
}

// TestLaterStartReplaces: a second Start takes over; the first's stop then does
// nothing, and the second's restores the percent from before the first.
func TestLaterStartReplaces(t *testing.T) {
	t.Setenv("GOGC", "")
	prev := debug.SetGCPercent(90)
	defer debug.SetGCPercent(prev)
	stopA := Start(16 << 20)
	stopB := Start(64 << 20)
	t.Cleanup(stopB)
	settled(t, 64<<20)
	stopA()
	if p := gcPercent(); p == 90 {
		t.Error("the replaced Start's stop restored the percent under the active one")
	}
	settled(t, 64<<20)
	stopB()
	if p := gcPercent(); p != 90 {
		t.Errorf("after the last stop: GC percent %d, want 90", p)
	}
}
