package server

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
	"github.com/sluicehq/sluice/internal/sfv"
)

// envoyCache is what the server derives once from a configuration's Envoy domains, so
// that a request does no label lookup and no escaping: per rule, its descriptor counters
// and its name as the RateLimit fields write it.
type envoyCache struct {
	cfg     *config.Config
	domains map[string]*envoyDomain
}

// envoyDomain is one domain of an envoyCache.
type envoyDomain struct {
	dom *config.Domain
	// noRule counts the descriptors no rule matched; override those decided by a
	// request's limit override (rule label "override": never request values).
	noRule, override *resultCounters
	rules            map[*config.Rule]*envoyRule
}

// envoyRule is one rule of an envoyDomain.
type envoyRule struct {
	counters *resultCounters
	// quoted is ruleName as an RFC 9651 String.
	quoted string
	// policy is the rule's RateLimit-Policy member, "" for a calendar period's.
	policy string
	limit  sluice.Limit
}

// The results of sluice_envoy_descriptors_total.
const (
	resultOK = iota
	resultOverLimit
	resultShadowOverLimit
	resultUnlimited
	resultNoMatch
	resultReplaced
	numResults
)

var resultNames = [numResults]string{"ok", "over_limit", "shadow_over_limit", "unlimited", "no_match", "replaced"}

// resultCounters are the descriptor counters of one (domain, rule) by result, each
// resolved on first use so that a series appears only once counted.
type resultCounters struct {
	vec          *prometheus.CounterVec
	domain, rule string
	c            [numResults]atomic.Pointer[prometheus.Counter]
}

func (rc *resultCounters) inc(result int) {
	if c := rc.c[result].Load(); c != nil {
		(*c).Inc()
		return
	}
	c := rc.vec.WithLabelValues(rc.domain, rc.rule, resultNames[result])
	rc.c[result].Store(&c)
	c.Inc()
}

// envoyCache returns the envoyCache of cfg, making it once.
func (s *Server) envoyCache(cfg *config.Config) *envoyCache {
	if c := s.envoy.Load(); c != nil && c.cfg == cfg {
		return c
	}
	s.envoyMu.Lock()
	defer s.envoyMu.Unlock()
	if c := s.envoy.Load(); c != nil && c.cfg == cfg {
		return c
	}
	c := newEnvoyCache(cfg, s.metrics.descriptors)
	s.envoy.Store(c)
	return c
}

func newEnvoyCache(cfg *config.Config, vec *prometheus.CounterVec) *envoyCache {
	c := &envoyCache{cfg: cfg, domains: make(map[string]*envoyDomain, len(cfg.Domains))}
	for _, dom := range cfg.Domains {
		d := &envoyDomain{
			dom:      dom,
			noRule:   &resultCounters{vec: vec, domain: dom.Name},
			override: &resultCounters{vec: vec, domain: dom.Name, rule: "override"},
			rules:    make(map[*config.Rule]*envoyRule, len(dom.Rules)),
		}
		for _, r := range dom.Rules {
			d.rules[r] = newEnvoyRule(vec, dom.Name, r)
		}
		c.domains[dom.Name] = d
	}
	return c
}

func newEnvoyRule(vec *prometheus.CounterVec, domain string, r *config.Rule) *envoyRule {
	label := r.FullKey
	if r.Pos.File == "" {
		label = "override" // not from a file: made from a request's limit override
	}
	er := &envoyRule{
		counters: &resultCounters{vec: vec, domain: domain, rule: label},
		quoted:   string(sfv.AppendString(nil, ruleName(r))),
		limit:    r.Limit,
	}
	if l := r.Limit; l.Calendar.IsZero() {
		m := ratelimitheader.Member{Quoted: er.quoted, Decision: &sluice.Decision{Limit: l}}
		er.policy = string(ratelimitheader.AppendPolicy(nil, &m))
	}
	return er
}

// ruleName is what headers and the JSON answer call a rule's limit.
func ruleName(r *config.Rule) string {
	if r.Name != "" {
		return r.Name
	}
	return r.FullKey
}

// count counts one answered descriptor of d.
func (d *envoyDomain) count(it *item) {
	rc := d.noRule
	switch {
	case it.rule == nil:
	case it.envoy != nil:
		rc = it.envoy.counters
	default:
		rc = d.override // made from the request's limit override
	}
	rc.inc(descriptorResult(it))
}

// descriptorResult is the result label of an answered descriptor.
func descriptorResult(it *item) int {
	switch it.status {
	case config.NoMatch:
		return resultNoMatch
	case config.Unlimited:
		return resultUnlimited
	case config.Replaced:
		return resultReplaced
	}
	switch {
	case it.Over() && it.Shadow:
		return resultShadowOverLimit
	case it.Over():
		return resultOverLimit
	}
	return resultOK
}
