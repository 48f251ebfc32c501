// Package headroom paces Go's garbage collector by a heap headroom: between two
// collections the heap may grow by at least a fixed number of bytes, and by Go's default
// share of what is live (GOGC=100) once that share is larger: a service that keeps little
// state but allocates on every request trades those bytes for fewer collections.
//
// After each collection (a finalizer that re-arms itself), the GC percent is set
// (debug.SetGCPercent) to Percent of the heap that collection marked live and the stacks
// and globals it scanned (runtime/metrics). A heap that grows fast between two collections
// may overshoot once, by percent of what was live at the first; the next collection
// corrects it. A memory limit (GOMEMLIMIT) still holds.
//
// GC percent is a property of the process, so there is one pacing at a time: a Start
// replaces the one before it.
package headroom

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Default is the headroom `sluice serve` and `sluice proxy` run with unless told
// otherwise (--gc-headroom-bytes): 64 MiB, a few collections a second at tens of
// thousands of requests a second, within the 256 MiB the Helm chart's pod may use.
const Default = 64 << 20

// minHeap is the runtime's heap minimum at GOGC=100: whatever it marked live, its goal is
// never below minHeap·percent/100.
const minHeap = 4 << 20

// maxPercent bounds the percent Percent returns: at it the heap may grow to 1,000 times
// what is live, and to 4 GiB before the runtime's minimum gives way, far beyond any
// headroom worth setting.
const maxPercent = 100_000

// Percent returns the least GC percent, at least 100 and at most 100,000, that makes the
// runtime's next heap goal at least live + headroom, where live is the heap the last
// collection marked and roots the stacks and globals it scanned. The runtime's goal is
// live + (live + roots)·percent/100, and never below 4 MiB·percent/100: the first term
// decides when live + roots is at least 4 MiB, the minimum below that (and before the
// first collection, when nothing has been marked). It is 100 when headroom ≤ 0.
func Percent(live, roots, headroom int64) int {
	if headroom <= 0 {
		return 100
	}
	grow, base := headroom, live+roots
	if base < minHeap {
		grow, base = live+headroom, minHeap
	}
	p := (grow*100 + base - 1) / base
	return int(min(max(p, 100), maxPercent))
}

var (
	mu     sync.Mutex
	active *pacing
)

// A pacing is one Start's hook. It runs while it is active; replaced or stopped, its
// next collection ends it.
type pacing struct {
	headroom int64
	prev     int // the GC percent before the first Start of those that replaced each other
	last     int // the percent last set
	samples  [3]metrics.Sample
}

// cycle is the object whose finalizer runs once per collection. Its pointer field keeps
// it out of the runtime's tiny allocator, whose blocks are freed together.
type cycle struct{ p *pacing }

// Start paces the collector with the given headroom, in bytes, until the returned stop
// is called; stop restores the GC percent there was before Start. Start does nothing
// (and stop does nothing) when headroom ≤ 0 or when the environment sets GOGC: the
// operator chose the pacing. A later Start replaces this one, and this stop then does
// nothing.
func Start(headroom int64) (stop func()) {
	if headroom <= 0 || os.Getenv("GOGC") != "" {
		return func() {}
	}
	p := &pacing{headroom: headroom}
	p.samples[0].Name = "/gc/heap/live:bytes"
	p.samples[1].Name = "/gc/scan/stack:bytes"
	p.samples[2].Name = "/gc/scan/globals:bytes"
	mu.Lock()
	p.last = p.percent()
	p.prev = debug.SetGCPercent(p.last)
	if active != nil { // the percent before it is the one to restore
		p.prev = active.prev
	}
	active = p
	mu.Unlock()
	runtime.SetFinalizer(&cycle{p}, collected)
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if active == p {
			active = nil
			debug.SetGCPercent(p.prev)
		}
	}
}

// collected runs after each collection: it sets the percent for the next, and waits for
// the one after by setting itself again as c's finalizer (c is reachable again while
// its finalizer runs, and unreachable once it returns).
func collected(c *cycle) {
	mu.Lock()
	if active != c.p {
		mu.Unlock()
		return
	}
	if pc := c.p.percent(); pc != c.p.last {
		debug.SetGCPercent(pc)
		c.p.last = pc
	}
	mu.Unlock()
	runtime.SetFinalizer(c, collected)
}

// percent is Percent of the last collection's figures. The caller holds mu.
func (p *pacing) percent() int {
	metrics.Read(p.samples[:])
	var v [3]int64
	for i, s := range p.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = int64(s.Value.Uint64())
		}
	}
	return Percent(v[0], v[1]+v[2], p.headroom)
}
