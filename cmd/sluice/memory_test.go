package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// metric returns the value of the sample whose line starts with name (labels included),
// or -1 when /metrics has none.
func metric(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(l, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// TestServeBoundsMemory: a client spraying distinct keys at `sluice serve` on the memory
// store does not grow it past its bound; the states closest to empty are evicted, and
// /metrics counts every eviction (issue 20, item 11: the store was unbounded by default
// and evictions were not exported).
func TestServeBoundsMemory(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "p.yaml")
	// GCRA at 5 an hour: a state empties 12 minutes after its one decision, so nothing is
	// swept or replaced during the test and every state past the bound is an eviction. (Not
	// a fixed window: its windows are aligned to the hour, and one that ends during the
	// test empties every state at once, which inserts then replace uncounted.)
	os.WriteFile(cfg, []byte("policies:\n  - {name: per-key, key: ip, algorithm: gcra, rate: 5, period: hour}\n"), 0o644)
	const bound, keys = 300, 1200
	base, _, _ := started(t, "--config", cfg, "--max-keys", strconv.Itoa(bound))

	var wg sync.WaitGroup
	errs := make(chan error, keys)
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				body := fmt.Sprintf(`{"policy":"per-key","key":"10.%d.%d.%d"}`, i>>16&255, i>>8&255, i&255)
				rp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err
					continue
				}
				rp.Body.Close()
				if rp.StatusCode != 200 {
					errs <- fmt.Errorf("key %d: status %d", i, rp.StatusCode)
				}
			}
		})
	}
	for i := range keys {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	m := httpGet(t, base+"/metrics")
	held := metric(m, `sluice_memory_keys{store="memory"}`)
	evicted := metric(m, `sluice_memory_evictions_total{store="memory"}`)
	if held < 0 || evicted < 0 {
		t.Fatalf("/metrics lacks the memory store's size or evictions:\n%s", grepLines(m, "sluice_memory"))
	}
	if held > bound {
		t.Errorf("%v keys held, bound %d", held, bound)
	}
	if held+evicted != keys {
		t.Errorf("%v held + %v evicted = %v, want the %d keys sprayed", held, evicted, held+evicted, keys)
	}
}
