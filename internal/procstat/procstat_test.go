package procstat

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestCPU: spinning for 50 ms of wall time adds CPU time, and not more than the process's
// threads could have used.
func TestCPU(t *testing.T) {
	before := CPU()
	start := time.Now()
	for x := 0; time.Since(start) < 50*time.Millisecond; x++ {
		runtime.KeepAlive(x)
	}
	used := CPU() - before
	if used <= 0 || used > 10*time.Second {
		t.Fatalf("CPU() moved by %v over 50ms of spinning", used)
	}
}

// TestContextSwitches: goroutines handing a token back and forth through unbuffered
// channels, each locked to its own thread, switch threads at every hand-off.
func TestContextSwitches(t *testing.T) {
	before := ContextSwitches(t)
	const hops = 200
	ping, pong := make(chan int), make(chan int)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for v := range ping {
			pong <- v
		}
	}()
	runtime.LockOSThread()
	for i := range hops {
		ping <- i
		<-pong
	}
	runtime.UnlockOSThread()
	close(ping)
	wg.Wait()
	after := ContextSwitches(t)
	if after-before < hops {
		t.Fatalf("%d context switches over %d hand-offs between two locked threads, want at least %d", after-before, hops, hops)
	}
}
