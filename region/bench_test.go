package region

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkGlobalSyncInterval produces the figure in docs/regions-and-pacing.md: for each
// sync interval, three nodes in two regions (one behind 10ms of latency each way) share a
// 200/s burst-20 limit while demand moves between them (all three, n1 alone, n3 alone, n2
// and n3; 800ms each). It reports the worst overshoot (units above what one limiter could
// admit, over intervals from T to the whole run; negative is a margin; the documented bound
// is 3) and the share of the limit used.
//
//	go test -run '^$' -bench GlobalSyncInterval -benchtime 1x ./region/
func BenchmarkGlobalSyncInterval(b *testing.B) {
	srv := redistest.Start(b)
	phases := []phase{
		{800 * time.Millisecond, []int{0, 1, 2}},
		{800 * time.Millisecond, []int{0}},
		{800 * time.Millisecond, []int{2}},
		{800 * time.Millisecond, []int{1, 2}},
	}
	var total time.Duration
	for _, p := range phases {
		total += p.d
	}
	for _, interval := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
		50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond} {
		b.Run(fmt.Sprintf("sync=%v", interval), func(b *testing.B) {
			over, used := math.Inf(-1), 0.0
			for i := 0; i < b.N; i++ {
				c := newCluster(b, srv, WithSyncInterval(interval))
				c.run(fmt.Sprintf("fig-%v-%d", interval, i), phases, nil)
				ev := c.all()
				o, _ := overshoot(ev, globalLimit, total.Microseconds())
				over = max(over, float64(o))
				allowed := float64(globalLimit.Burst) + float64(globalLimit.Rate)*total.Seconds()
				used += 100 * float64(len(ev)) / allowed
			}
			b.ReportMetric(over, "overshoot-units")
			b.ReportMetric(used/float64(b.N), "%-used")
			b.ReportMetric(0, "ns/op")
		})
	}
}
