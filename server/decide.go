package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/evaluator"
	"github.com/sluicehq/sluice/internal/span"
	"github.com/sluicehq/sluice/keys"
)

// item is one limit of one request: a policy's limit, a policy's route limit, or one Envoy
// descriptor match.
type item struct {
	evaluator.Item
	// name is what headers and the JSON answer call the limit.
	name string
	// status is how the limit was found; only Limited items reach the store.
	status config.Status
	// rule is the Envoy rule that matched (nil for policies and NoMatch).
	rule *config.Rule
	// envoy is what was derived from rule at load (nil for none, or a limit override).
	envoy *envoyRule
	// unitMultiplier is an Envoy limit override's unit_multiplier (0 when none).
	unitMultiplier uint32
	// source and route are LimitStatus's.
	source, route string
	// identity is who a policy's limit limits (zero for descriptors).
	identity keys.Identity
}

func itemOf(it *item) *evaluator.Item { return &it.Item }

// scope is what the limits of one request share: the name of their policy or domain, and
// the policy (nil for a domain), whose failure handling applies.
type scope struct {
	name   string
	policy *config.Policy
}

// decide decides the items of sc (package evaluator) in a span named op. Errors are the
// enforced limits' store call's; the caller ruled out bad input.
func (s *Server) decide(ctx context.Context, op string, cfg *config.Config, sc scope, items []item) (evaluator.Outcome, error) {
	f := cfg.Failure(sc.policy, s.opts.FailureMode)
	name := sc.name
	for i := range items {
		it := &items[i]
		it.Skip = it.status != config.Limited && it.status != config.Blocked
		it.Blocked = it.status == config.Blocked
		it.Policy, it.Failure = name, f
		if it.route != "" {
			it.Policy = it.name // a route limit: "<policy> <pattern>", as the proxy names it
		}
	}
	ctx, sp := s.tracer.Start(ctx, op)
	out, err := evaluator.Evaluate(ctx, s.opts.Limiter, items, itemOf)
	if sp.On() {
		key := span.KeyPolicy
		if op == opRLS {
			key = span.KeyDomain
		}
		sp.End(key.String(name), out, err)
	}
	for _, e := range out.ShadowErrors { // never part of the answer
		s.log.LogAttrs(ctx, slog.LevelError, "shadow limit not decided", slog.String("error", e.Error()))
	}
	return out, err
}

// The names of decision spans.
const (
	opRLS   = "sluice.ShouldRateLimit"
	opCheck = "sluice.check"
	opPeek  = "sluice.peek"
	opUsage = "sluice.usage"
)

// windowReset is the time until the epoch-aligned window of length period holding now
// ends (a requests_per_unit 0 rule's wait).
func windowReset(now time.Time, period time.Duration) time.Duration {
	if period <= 0 {
		return 0
	}
	us := now.UnixMicro()
	p := period.Microseconds()
	return time.Duration(p-us%p) * time.Microsecond
}
