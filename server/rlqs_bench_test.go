package server

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/rueidis"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/procstat"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/quota"
)

// BenchmarkRLQSReport measures the service's cost of one usage report (one message of
// 100 buckets, answered with 100 actions, on the memory quota store) with 1,000 clients
// connected, each reporting on the same 100 buckets, and the memory each connected
// client costs (its stream's state and its entries in the store), without the gRPC
// transport.
// On Redis it also reports Redis's own time per bucket rebalanced (INFO commandstats).
func BenchmarkRLQSReport(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchmarkRLQSReport(b, quota.NewMemory(nil), nil) })
	b.Run("redis", func(b *testing.B) {
		srv := redistest.Start(b)
		client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		defer client.Close()
		benchmarkRLQSReport(b, quota.NewRedis(func() rueidis.Client { return client }, "b:", nil), client)
	})
}

func benchmarkRLQSReport(b *testing.B, qs quota.Store, redis rueidis.Client) {
	const clients, buckets = 1000, 100
	store := memory.New()
	defer store.Close()
	s, err := New(Options{Limiter: store, Config: quotaCfg(b), Quota: QuotaOptions{Store: qs}})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]*rlqsv3.RateLimitQuotaUsageReports, clients)
	for c := range msgs {
		m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"}
		for k := range buckets {
			m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"name": fmt.Sprint("bucket-", k)}},
				TimeElapsed:        durationpb.New(time.Second),
				NumRequestsAllowed: uint64(c % 7),
				NumRequestsDenied:  uint64(c % 3),
			})
		}
		msgs[c] = m
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	streams := make([]*quotaStream, clients)
	for c := range streams {
		streams[c] = &quotaStream{q: s.rlqs, ctx: context.Background(), id: rand.Text(), buckets: map[string]*streamBucket{}}
		if _, err := streams[c].report(msgs[c]); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perClient := float64(after.HeapAlloc-before.HeapAlloc) / clients
	b.ReportAllocs()
	if redis != nil {
		redis.Do(context.Background(), redis.B().ConfigResetstat().Build())
	}
	cpu0 := procstat.CPU()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		c := i % clients
		i++
		if _, err := streams[c].report(msgs[c]); err != nil {
			b.Fatal(err)
		}
	}
	// CPU time, not wall time: on a shared machine the two differ.
	b.ReportMetric(float64((procstat.CPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/report")
	b.ReportMetric(perClient, "B/client")
	if redis != nil {
		info, _ := redis.Do(context.Background(), redis.B().Info().Section("commandstats").Build()).ToString()
		for _, line := range strings.Split(info, "\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha:") {
				var calls, usec int64
				for _, f := range strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_evalsha:")), ",") {
					k, v, _ := strings.Cut(f, "=")
					switch k {
					case "calls":
						calls, _ = strconv.ParseInt(v, 10, 64)
					case "usec":
						usec, _ = strconv.ParseInt(v, 10, 64)
					}
				}
				if calls > 0 {
					b.ReportMetric(float64(usec)/float64(calls), "redis-µs/bucket")
				}
			}
		}
	}
	runtime.KeepAlive(streams)
}
