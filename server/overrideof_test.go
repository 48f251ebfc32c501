package server

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// TestOverrideOfReadsAsAFile: an override request's limit is read as a policy's in a
// file: it inherits the policy's algorithm, a concurrency limit takes a lease, and an
// error names the field at fault, including one only sluice.Limit.Validate finds.
func TestOverrideOfReadsAsAFile(t *testing.T) {
	cfg := parseConfig(t, configFile("p.yaml", `policies:
  - {name: slots, key: user, algorithm: concurrency, rate: 2, lease: 30s}
  - {name: bucket, key: user, algorithm: token_bucket, rate: 5, period: 1s}
`))
	slots, _ := cfg.Policy("slots")
	bucket, _ := cfg.Policy("bucket")
	now := time.Unix(1_700_000_000, 0)
	o, err := overrideOf(slots, "alice", &OverrideRequest{LimitSpec: config.LimitSpec{Rate: 9, Lease: "1m"}}, now)
	if err != nil || o.Limit != (sluice.Limit{Algorithm: sluice.Concurrency, Rate: 9, Lease: time.Minute}) || o.Spec.Algorithm != "concurrency" {
		t.Fatalf("concurrency: %+v, %v", o, err)
	}
	o, err = overrideOf(bucket, "alice", &OverrideRequest{LimitSpec: config.LimitSpec{Rate: 9, Period: "1m"}}, now)
	if err != nil || o.Limit.Algorithm != sluice.TokenBucket || o.Spec.Algorithm != "token_bucket" {
		t.Fatalf("inherited algorithm: %+v, %v", o, err)
	}
	for _, tc := range []struct {
		p    *config.Policy
		spec config.LimitSpec
		want string
	}{
		{slots, config.LimitSpec{Rate: 9, Period: "1m", Lease: "1m"}, "period: is not used by concurrency limits"},
		{slots, config.LimitSpec{Rate: 9}, "lease: is required"},
		{bucket, config.LimitSpec{Rate: 5, Period: "24h", Burst: 2_000_000}, "burst: burst 2000000"},
		{bucket, config.LimitSpec{Rate: 2_000_000, Period: "1s"}, "rate: 2000000 per 1s spaces events"},
	} {
		_, err := overrideOf(tc.p, "alice", &OverrideRequest{LimitSpec: tc.spec}, now)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.spec, err, tc.want)
		}
	}
}
