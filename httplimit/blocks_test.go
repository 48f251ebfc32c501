package httplimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/evaluator"
)

// TestBlocksIsTheEvaluators: whether a policy denied its request (Result.Violated, the log
// level, the legacy fields' choice) is the evaluator's judgement of its item, for every
// kind of outcome: a denial with a wait, one that would have passed alone, a cost no wait
// can allow (TooBig), a shadow denial, an admission.
func TestBlocksIsTheEvaluators(t *testing.T) {
	lim := sluice.PerMinute(3)
	denied := sluice.Decision{Limit: lim, RetryAfter: time.Second}
	passedAlone := sluice.Decision{Limit: lim, Remaining: 2}
	allowed := sluice.Decision{Allowed: true, Limit: lim, Remaining: 2}
	for _, c := range []struct {
		d              sluice.Decision
		shadow, tooBig bool
	}{
		{d: denied}, {d: passedAlone}, {d: allowed},
		{d: sluice.Decision{Limit: lim, Remaining: 3}, tooBig: true},
		{d: denied, shadow: true}, {d: sluice.Decision{Limit: lim, Remaining: 3}, tooBig: true, shadow: true},
	} {
		p := pending{Item: evaluator.Item{Request: sluice.Request{Key: "k", Limit: lim, N: 1, Shadow: c.shadow},
			Decision: c.d, Decided: true, TooBig: c.tooBig}, d: PolicyDecision{Policy: "p", Shadow: c.shadow}}
		p.decided()
		res := Result{Decisions: []PolicyDecision{p.d}}
		if got, want := len(res.Violated()) == 1, p.Blocks(); got != want {
			t.Errorf("%+v: violated %v, evaluator's Blocks %v", c, got, want)
		}
		if fmt.Sprint(p.d.Decision) != fmt.Sprint(c.d) {
			t.Errorf("%+v: decision %+v", c, p.d.Decision)
		}
	}
}
