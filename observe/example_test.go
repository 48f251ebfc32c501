package observe_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/observe"
)

func Example() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	store := memory.New(memory.WithClock(func() time.Time { return now })) // in production: redisstore
	defer store.Close()
	fo := failover.New(store, failover.WithDeadline(time.Second)) // default 5ms; see below
	defer fo.Close()

	metrics, err := observe.NewMetrics(prometheus.NewRegistry()) // e.g. prometheus.DefaultRegisterer
	if err != nil {
		panic(err)
	}
	defer metrics.Close()

	// Drop the timings, and (above) allow a generous deadline, so that the output is the
	// same on every run, however busy the machine.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "latency_us", "store_latency_us":
				return slog.Attr{}
			}
			return a
		},
	}))
	lim := observe.New(fo, observe.WithLogger(logger), observe.WithMetrics(metrics), observe.WithSampling(0))

	ctx := context.Background()
	req := []sluice.Request{{Key: "api_key:0f3a...", Limit: sluice.PerMinute(2), N: 1, Policy: "per-api-key"}}
	ds := make([]sluice.Decision, 1)
	for i := 0; i < 3; i++ {
		lim.Decide(ctx, req, ds)
		fmt.Println("allowed:", ds[0].Allowed)
	}
	// Output:
	// allowed: true
	// allowed: true
	// level=INFO msg="rate limit decision" policy=per-api-key key=sha256:66adebaaf8867d97 algorithm=gcra limit=2 period_ms=60000 cost=1 allowed=false remaining=0 used=2 retry_after_ms=30000 reset_after_ms=60000 path=store breaker=closed
	// allowed: false
}
