package server

import (
	"context"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/quota"
)

// BenchmarkRLQSReport measures the service's cost of one usage report (one message of
// 100 buckets, answered with 100 actions, on the memory quota store) with 1,000 clients
// connected, each reporting on the same 100 buckets, and the memory each connected
// client costs (its stream's state and its entries in the store), without the gRPC
// transport.
func BenchmarkRLQSReport(b *testing.B) {
	const clients, buckets = 1000, 100
	store := memory.New()
	defer store.Close()
	s, err := New(Options{Limiter: store, Config: quotaCfg(b), Quota: QuotaOptions{Store: quota.NewMemory(nil)}})
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
		streams[c] = &quotaStream{q: s.rlqs, ctx: context.Background(), id: newClientID(), buckets: map[string]*streamBucket{}}
		if _, err := streams[c].report(msgs[c]); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perClient := float64(after.HeapAlloc-before.HeapAlloc) / clients
	b.ReportAllocs()
	cpu0 := cpuTime()
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
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/report")
	b.ReportMetric(perClient, "B/client")
	runtime.KeepAlive(streams)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
