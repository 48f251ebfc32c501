package redisstore_test

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// redisURL is the server the examples talk to; TestMain starts it.
var redisURL string

func TestMain(m *testing.M) {
	// Fuzzing (make fuzz) needs no Redis: its targets are pure, and a redis-server per fuzz
	// worker would only compete with them.
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		os.Exit(m.Run())
	}
	redistest.Main(m, func(url string) { redisURL = url })
}

func Example() {
	store, err := redisstore.Open(redisURL) // e.g. "redis://localhost:6379"
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	limit := sluice.PerMinute(2) // GCRA, 2 per minute, burst 2
	for i := 0; i < 3; i++ {
		d, err := store.AllowN(ctx, "user:42", limit, 1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed=%v remaining=%d retry-after=%v\n", d.Allowed, d.Remaining, d.RetryAfter.Round(time.Second))
	}
	// Output:
	// allowed=true remaining=1 retry-after=0s
	// allowed=true remaining=0 retry-after=0s
	// allowed=false remaining=0 retry-after=30s
}

// Several limits on one identity, all or nothing: 2 per minute and 3 per hour: a
// request the minute's limit denies spends nothing from the hour's.
func ExampleStore_Decide() {
	store, err := redisstore.Open(redisURL)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	ctx := context.Background()
	perMinute := sluice.PerMinute(2)
	perHour := sluice.PerHour(3).With(sluice.SlidingLog)
	for i := 0; i < 4; i++ {
		ds, err := sluice.AllowMulti(ctx, store, []sluice.Request{
			{Key: "api-key:7", Limit: perMinute, N: 1},
			{Key: "api-key:7", Limit: perHour, N: 1},
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("allowed=%v per-minute remaining=%d per-hour remaining=%d\n", ds[0].Allowed, ds[0].Remaining, ds[1].Remaining)
	}
	// Output:
	// allowed=true per-minute remaining=1 per-hour remaining=2
	// allowed=true per-minute remaining=0 per-hour remaining=1
	// allowed=false per-minute remaining=0 per-hour remaining=1
	// allowed=false per-minute remaining=0 per-hour remaining=1
}
