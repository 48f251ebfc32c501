package main

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/internal/headroom"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestBinaryGCHeadroom: the built binary paces its collector by --gc-headroom-bytes, in
// serve and in proxy, on memory and on Redis, as /metrics shows (go_gc_gogc_percent). A
// fresh process, a few MB live, runs far above Go's 100% by default; at 100% with the
// flag at 0; and at the operator's GOGC when the environment sets it.
func TestBinaryGCHeadroom(t *testing.T) {
	bin := sluiceBinary(t)
	onRedis := []string{"--redis", redistest.Start(t).URL()}
	serve := []string{"serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log-format", "json"}
	proxy := []string{"proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--admin", "127.0.0.1:0", "--log-format", "json"}
	// A live heap of at most 16 MiB (a fresh process holds a few) with the default
	// headroom of 64 MiB gives at least this percent (headroom.Percent).
	least := float64(headroom.Percent(16<<20, 0, headroom.Default))
	for _, c := range []struct {
		name            string
		gogc            string
		args            []string
		atLeast, atMost float64
	}{
		{"serve, default", "", serve, least, 100_000},
		{"proxy, default", "", proxy, least, 100_000},
		{"serve on Redis, default", "", slices.Concat(serve, onRedis), least, 100_000},
		{"proxy on Redis, default", "", slices.Concat(proxy, onRedis), least, 100_000},
		{"serve, --gc-headroom-bytes 0", "", slices.Concat(serve, []string{"--gc-headroom-bytes", "0"}), 100, 100},
		{"proxy, --gc-headroom-bytes 0", "", slices.Concat(proxy, []string{"--gc-headroom-bytes", "0"}), 100, 100},
		{"serve, GOGC=150", "150", serve, 150, 150},
		{"proxy, GOGC=150", "150", proxy, 150, 150},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOGC", c.gogc)
			p := startBinary(t, bin, c.args...)
			got := metricValue(t, p.base, "go_gc_gogc_percent")
			if got < c.atLeast || got > c.atMost {
				t.Errorf("go_gc_gogc_percent %v, want in [%v, %v]", got, c.atLeast, c.atMost)
			}
		})
	}
}
