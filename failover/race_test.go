//go:build race

package failover

import "time"

// faultDeadline is the deadline of the fault tests under the race detector, which slows
// every call several times over (a healthy Redis decision takes ~3ms at the median and
// ~40ms at p99 under it on two busy cores). Decisions must still be cut well below the
// 100ms round trip of the latency fault.
const faultDeadline = 60 * time.Millisecond
