package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestServeRLQS: `sluice serve` answers StreamRateLimitQuotas on its gRPC port, beside
// RLS, on memory and on Redis, for buckets an envoyproxy/ratelimit file declares.
func TestServeRLQS(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(file, []byte(`domain: mesh
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 5}
quota_buckets:
  - {name: per-route, bucket_id: {route: "*"}, rate: 100, period: 1s}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			if store == "redis" {
				t.Setenv("SLUICE_REDIS_URL", redistest.Start(t).URL())
			}
			_, grpcAddr, _ := started(t, "--config", file, "--log-level", "warn")
			conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "mesh", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
				BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"route": "/a"}}, TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 40,
			}}}); err != nil {
				t.Fatal(err)
			}
			resp, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
			if n := tb.GetTokensPerFill().GetValue(); n == 0 || n > 100 {
				t.Fatalf("answer %v", resp)
			}
		})
	}
}
