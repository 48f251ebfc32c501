//go:build race

package failover

import "time"

// faultDeadline is the deadline of the fault tests under the race detector, which slows
// every call several times over (a healthy Redis decision takes ~3ms at the median and
// ~40ms at p99 under it on two busy cores). Decisions must still be cut below the 100ms
// that the latency fault adds to a round trip.
const faultDeadline = 90 * time.Millisecond

// loadPause is the pause of each load goroutine between decisions. Under the race
// detector a decision costs ten times the CPU: the load is paced so that it does not
// starve the server and the timers it is measuring.
const loadPause = 10 * time.Millisecond
