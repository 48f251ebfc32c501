package bench

import (
	"context"
	"fmt"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/bench/internal/lean"
	"github.com/sluicehq/sluice/internal/redistest"
)

// BenchmarkRedisClient compares Redis clients sending the same EVALSHA, one per decision
// (lean.Script with one key: the per-call work is the same for every client, so the
// comparison measures clients), to one redis-server: rueidis (auto-pipelining on one
// multiplexed connection) and go-redis v9 without pipelining (a pool of connections),
// with its blocking auto-pipeliner (ordered default), and with its auto-pipeliner in
// unordered parallel-batch mode.
func BenchmarkRedisClient(b *testing.B) {
	srv := redistest.Start(b)
	sha, err := srv.Do("SCRIPT", "LOAD", lean.Script)
	if err != nil {
		b.Fatal(err)
	}

	type client struct {
		name string
		open func() (decideFunc, func())
	}
	goredisOpts := func() *goredis.Options {
		return &goredis.Options{Addr: srv.Addr(), Protocol: 3}
	}
	clients := []client{
		{"rueidis", func() (decideFunc, func()) {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
			if err != nil {
				b.Fatal(err)
			}
			return func(ctx context.Context, i int) error {
				cmd := c.B().Evalsha().Sha1(sha).Numkeys(1).Key(benchKey(i)).Arg(lean.Args...).Build()
				return c.Do(ctx, cmd).Error()
			}, c.Close
		}},
		{"go-redis", func() (decideFunc, func()) {
			c := goredis.NewClient(goredisOpts())
			return evalshaGoRedis(c, sha), func() { _ = c.Close() }
		}},
		{"go-redis-autopipeline", func() (decideFunc, func()) {
			c := goredis.NewClient(goredisOpts())
			ap, err := c.AutoPipeline()
			if err != nil {
				b.Fatal(err)
			}
			return evalshaGoRedis(ap, sha), func() { _ = c.Close() }
		}},
		{"go-redis-autopipeline-unordered", func() (decideFunc, func()) {
			c := goredis.NewClient(goredisOpts())
			ap, err := c.AutoPipelineWithOptions(&goredis.AutoPipelineOptions{
				MaxBatchSize: 300, MaxConcurrentBatches: 8, Unordered: true,
			})
			if err != nil {
				b.Fatal(err)
			}
			return evalshaGoRedis(ap, sha), func() { _ = c.Close() }
		}},
	}
	decides := make([]decideFunc, len(clients))
	for i, c := range clients {
		decide, closeFn := c.open()
		defer closeFn()
		decides[i] = decide
	}
	// Rounds interleave the clients, so that a load spike from elsewhere on the machine
	// hits them alike; compare medians over rounds.
	for round := 0; round < redisRounds; round++ {
		for _, g := range redisGoroutines {
			for i, c := range clients {
				b.Run(fmt.Sprintf("round=%d/client=%s/goroutines=%d", round, c.name, g), func(b *testing.B) {
					runRedis(b, srv, g, decides[i])
				})
			}
		}
	}
}

func evalshaGoRedis(c goredis.Scripter, sha string) decideFunc {
	args := make([]any, len(lean.Args))
	for i, a := range lean.Args {
		args[i] = a
	}
	return func(ctx context.Context, i int) error {
		return c.EvalSha(ctx, sha, []string{benchKey(i)}, args...).Err()
	}
}
