// Package procstat reads what this process has used so far, for benchmarks that report a
// cost per operation which moves less with the machine's load than time does: CPU time
// (every thread's: the collector's and background goroutines' too) and context switches
// (a goroutine hand-off that wakes a parked thread costs one).
package procstat

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CPU is the CPU time this process has used so far, user and system; 0 where getrusage
// fails.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ContextSwitches is the voluntary and involuntary context switches of this process's
// live threads so far, from /proc/self/task/*/status; it fails tb where they cannot be
// read. A thread that has ended takes its count with it, so read it around work that
// keeps its threads (the Go runtime's do).
func ContextSwitches(tb testing.TB) int64 {
	tb.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		tb.Fatalf("procstat: no /proc/self/task/*/status (Linux's /proc is needed): %v", err)
	}
	var n int64
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					tb.Fatalf("procstat: %s: %q: %v", t, line, err)
				}
				n += x
			}
		}
	}
	return n
}
