package server

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/keys"
)

func TestResolveMode(t *testing.T) {
	open := &config.Config{Store: config.Store{FailureMode: sluice.FailOpen}}
	unset := &config.Config{}
	for _, tc := range []struct {
		name           string
		cfg            *config.Config
		policy, server sluice.FailureMode
		want           sluice.FailureMode
	}{
		{"nothing set", unset, sluice.FailInherit, sluice.FailInherit, sluice.FailInherit},
		{"store default", open, sluice.FailInherit, sluice.FailInherit, sluice.FailOpen},
		{"policy inherits the store default", open, sluice.FailOpen, sluice.FailInherit, sluice.FailOpen},
		{"the flag overrides the store default", open, sluice.FailInherit, sluice.FailClosed, sluice.FailClosed},
		{"the flag overrides an inherited mode", open, sluice.FailOpen, sluice.FailClosed, sluice.FailClosed},
		{"a policy's own mode beats the flag", open, sluice.FailLocal, sluice.FailClosed, sluice.FailLocal},
		{"a policy's own mode without a store default", unset, sluice.FailClosed, sluice.FailOpen, sluice.FailClosed},
	} {
		if got := resolveMode(tc.cfg, tc.policy, tc.server); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPolicyFallback: the proxy's limiter finds each decision's failure mode from the
// policy named in its store key.
func TestPolicyFallback(t *testing.T) {
	cfg, err := config.Parse(config.File{Name: "p.yaml", Data: []byte(`
store: {failure_mode: open}
policies:
  - {name: strict, key: ip, rate: 1, period: second, failure_mode: closed, routes: {"POST /x": {rate: 1, period: second}}}
  - {name: lenient, key: ip, rate: 1, period: second}
  - {name: shared, key: ip, rate: 1, period: second, failure_mode: local, local_share: 0.25}
`)})
	if err != nil {
		t.Fatal(err)
	}
	id := keys.Identity{Kind: keys.IP, ID: "192.0.2.1"}
	for _, tc := range []struct {
		name string
		def  sluice.FailureMode
		key  string
		want failover.Fallback
	}{
		{"policy mode", sluice.FailInherit, keys.Of("strict", id, "", "").String(), failover.Fallback{Mode: failover.FailClosed}},
		{"route limit of the policy", sluice.FailInherit, keys.Of(RouteLimitName("strict", "POST /x"), id, "POST /x", "").String(), failover.Fallback{Mode: failover.FailClosed}},
		{"store default", sluice.FailInherit, keys.Of("lenient", id, "", "").String(), failover.Fallback{Mode: failover.FailOpen}},
		{"flag over the store default", sluice.FailClosed, keys.Of("lenient", id, "", "").String(), failover.Fallback{Mode: failover.FailClosed}},
		{"local with its own share", sluice.FailOpen, keys.Of("shared", id, "", "").String(), failover.Fallback{Mode: failover.FailLocal, Share: 0.25}},
		{"unknown policy", sluice.FailInherit, keys.Of("gone", id, "", "").String(), failover.Fallback{Mode: failover.FailOpen}},
		{"not a keys.Key", sluice.FailClosed, "envoy/edge/k=v", failover.Fallback{Mode: failover.FailClosed}},
	} {
		f := PolicyFallback(func() *config.Config { return cfg }, tc.def)
		if got := f(context.Background(), tc.key, sluice.PerSecond(1)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
