//go:build !race

package failover

import "time"

// faultDeadline is the deadline of the fault tests. It is above the 5ms default because
// the tests share two cores with everything else `go test ./...` runs: a deadline a
// healthy store misses now and then would trip the breaker before the fault. Set
// SLUICE_FAULT_DEADLINE (e.g. 5ms) to measure another.
const faultDeadline = 20 * time.Millisecond

// loadPause is the pause of each load goroutine between decisions: 36 goroutines offer
// up to ~18k decisions/s.
const loadPause = 2 * time.Millisecond
