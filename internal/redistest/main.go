package redistest

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
)

// Main starts a standalone redis-server for a whole test binary, passes its URL to use,
// runs the tests and stops the server. Call it from TestMain, typically for Example
// functions, which have no *testing.T:
//
//	func TestMain(m *testing.M) { redistest.Main(m, func(url string) { redisURL = url }) }
//
// Without redis-server the binary fails with InstallHint.
func Main(m *testing.M, use func(url string), opts ...Option) {
	tb := &mainTB{}
	var srv *Server
	var wg sync.WaitGroup
	wg.Go(func() { srv = Start(tb, opts...) }) // Fatalf ends this goroutine only
	wg.Wait()
	if tb.failed {
		tb.cleanup()
		os.Exit(1)
	}
	use(srv.URL())
	code := m.Run()
	tb.cleanup()
	os.Exit(code)
}

// mainTB is the part of testing.TB that Start uses, for a server started outside a test.
type mainTB struct {
	testing.TB // nil: only the methods below are called
	mu         sync.Mutex
	cleanups   []func()
	failed     bool
}

func (*mainTB) Helper() {}

func (tb *mainTB) Cleanup(f func()) {
	tb.mu.Lock()
	tb.cleanups = append(tb.cleanups, f)
	tb.mu.Unlock()
}

func (tb *mainTB) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (tb *mainTB) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	tb.mu.Lock()
	tb.failed = true
	tb.mu.Unlock()
}

func (tb *mainTB) Fatalf(format string, args ...any) {
	tb.Errorf(format, args...)
	runtime.Goexit()
}

func (tb *mainTB) cleanup() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}
