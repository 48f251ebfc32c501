package config

import (
	"fmt"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestFailureOrder: the whole table of a policy's own mode × the --failure-mode flag ×
// store.failure_mode resolves in the documented order: the policy, then the flag, then
// the store block, then open. In particular a policy whose own mode equals the store
// block's keeps it against the flag.
func TestFailureOrder(t *testing.T) {
	modes := []sluice.FailureMode{sluice.FailInherit, sluice.FailOpen, sluice.FailClosed, sluice.FailLocal}
	for _, store := range modes {
		for _, own := range modes {
			for _, flag := range modes {
				t.Run(fmt.Sprintf("store=%v/policy=%v/flag=%v", store, own, flag), func(t *testing.T) {
					c := &Config{Store: Store{FailureMode: store, LocalShare: 0.5}}
					want := sluice.FailOpen
					switch {
					case own != sluice.FailInherit:
						want = own
					case flag != sluice.FailInherit:
						want = flag
					case store != sluice.FailInherit:
						want = store
					}
					got := c.Failure(&Policy{FailureMode: own}, flag)
					if got.Mode != want || got.Share != 0.5 {
						t.Errorf("got %+v, want mode %v share 0.5", got, want)
					}
				})
			}
		}
	}
	var none *Config
	if got := none.Failure(nil, sluice.FailInherit); got != (sluice.Failure{Mode: sluice.FailOpen, Share: 1}) {
		t.Errorf("nil config, nothing set: %+v, want open with the whole limit", got)
	}
	if got := none.Failure(&Policy{LocalShare: 0.25}, sluice.FailLocal); got != (sluice.Failure{Mode: sluice.FailLocal, Share: 0.25}) {
		t.Errorf("nil config, flag local: %+v", got)
	}
}
