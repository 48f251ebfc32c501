package server

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/quota"
)

// FuzzRLQSReport: any usage report a client can send is answered with one action per
// bucket, or ends the stream with a status; never a panic. Each input is a sequence of
// reports on one stream (a later one may name another domain).
func FuzzRLQSReport(f *testing.F) {
	seed := func(ms ...*rlqsv3.RateLimitQuotaUsageReports) {
		var data []byte
		for _, m := range ms {
			b, _ := proto.Marshal(m)
			data = append(data, byte(len(b)), byte(len(b)>>8))
			data = append(data, b...)
		}
		f.Add(data)
	}
	u := func(id map[string]string, allowed, denied uint64, elapsed time.Duration) *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage {
		return &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: &rlqsv3.BucketId{Bucket: id},
			TimeElapsed: durationpb.New(elapsed), NumRequestsAllowed: allowed, NumRequestsDenied: denied}
	}
	seed(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		u(map[string]string{"name": "a"}, 10, 5, time.Second), u(map[string]string{"name": "closed"}, 1<<63, 1<<63, -time.Second),
		u(nil, 0, 0, 0), u(map[string]string{"name": "open", "x": "y"}, 0, 0, time.Hour),
	}}, &rlqsv3.RateLimitQuotaUsageReports{BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		u(map[string]string{"name": "a"}, 1, 0, time.Nanosecond)}})
	seed(&rlqsv3.RateLimitQuotaUsageReports{Domain: "nowhere"}, &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge"})

	store := memory.New()
	defer store.Close()
	s, err := New(Options{Limiter: store, Config: quotaCfg(f), Quota: QuotaOptions{Store: quota.NewMemory(nil), MaxBucketsPerStream: 8}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st := &quotaStream{q: s.rlqs, ctx: context.Background(), id: rand.Text(), buckets: map[string]*streamBucket{}}
		defer st.close()
		for len(data) >= 2 {
			n := int(data[0]) | int(data[1])<<8
			data = data[2:]
			n = min(n, len(data))
			m := &rlqsv3.RateLimitQuotaUsageReports{}
			if proto.Unmarshal(data[:n], m) != nil {
				return
			}
			data = data[n:]
			resp, err := st.report(m)
			if err != nil {
				return // the stream ends with a status
			}
			if resp == nil || len(resp.BucketAction) != len(m.BucketQuotaUsages) {
				t.Fatalf("%d actions for %d buckets", len(resp.GetBucketAction()), len(m.BucketQuotaUsages))
			}
			for i, a := range resp.BucketAction {
				if a.GetBucketId() != m.BucketQuotaUsages[i].GetBucketId() {
					t.Fatalf("action %d names another bucket", i)
				}
				if a.GetBucketAction() == nil {
					t.Fatalf("action %d is empty", i)
				}
			}
			if len(st.buckets) > 8 {
				t.Fatalf("%d buckets held, cap 8", len(st.buckets))
			}
		}
	})
}

// TestRLQSBucketFull: a bucket already divided among quota.MaxClients clients answers
// one more with abandon_action, and keeps nothing for it.
func TestRLQSBucketFull(t *testing.T) {
	store := memory.New()
	defer store.Close()
	s, err := New(Options{Limiter: store, Config: quotaCfg(t)})
	if err != nil {
		t.Fatal(err)
	}
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"name": "crowded"}}, NumRequestsAllowed: 1}}}
	var sum int64
	for i := range quota.MaxClients + 1 {
		st := &quotaStream{q: s.rlqs, ctx: context.Background(), id: rand.Text(), buckets: map[string]*streamBucket{}}
		resp, err := st.report(m)
		if err != nil {
			t.Fatal(err)
		}
		a := resp.BucketAction[0]
		if i < quota.MaxClients {
			sum += int64(a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue())
			continue
		}
		if a.GetAbandonAction() == nil {
			t.Fatalf("client %d: %v, want abandon_action", i, a)
		}
	}
	if sum > 100 {
		t.Fatalf("%d clients hold %d of 100", quota.MaxClients, sum)
	}
}
