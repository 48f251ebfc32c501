package config

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overload"
)

// Dump returns the configuration as indented JSON, for a service's config endpoint: every
// policy and rule with its limits, the files and the digest. Secrets are never in it (the
// Redis URL's password is redacted; tokens appear as the names of their sources).
func (c *Config) Dump() ([]byte, error) {
	lv := func(l sluice.Limit) *LimitSpec {
		if l.Rate == 0 {
			return nil
		}
		v := SpecOf(l)
		return &v
	}
	type named struct {
		Name        string     `json:"name"`
		Limit       *LimitSpec `json:"limit"`
		Criticality string     `json:"criticality,omitempty"`
	}
	type policyView struct {
		Name              string     `json:"name"`
		Source            string     `json:"source"`
		Limit             *LimitSpec `json:"limit,omitempty"`
		Key               string     `json:"key"`
		KeyHeader         string     `json:"key_header,omitempty"`
		Shadow            bool       `json:"shadow,omitempty"`
		FailureMode       string     `json:"failure_mode,omitempty"`
		LocalShare        float64    `json:"local_share,omitempty"`
		TierHeader        string     `json:"tier_header,omitempty"`
		DefaultTier       string     `json:"default_tier,omitempty"`
		Tiers             []named    `json:"tiers,omitempty"`
		Routes            []named    `json:"routes,omitempty"`
		OverrideCount     int        `json:"overrides,omitempty"`
		IdentityTierCount int        `json:"identity_tiers,omitempty"`
		Criticality       string     `json:"criticality,omitempty"`
	}
	type ruleView struct {
		Key             string     `json:"key"`
		Name            string     `json:"name,omitempty"`
		Unit            string     `json:"unit,omitempty"`
		RequestsPerUnit uint32     `json:"requests_per_unit"`
		Unlimited       bool       `json:"unlimited,omitempty"`
		Shadow          bool       `json:"shadow_mode,omitempty"`
		QuotaMode       bool       `json:"quota_mode,omitempty"`
		Replaces        []string   `json:"replaces,omitempty"`
		Limit           *LimitSpec `json:"limit,omitempty"`
		Source          string     `json:"source"`
	}
	type domainView struct {
		Name   string     `json:"name"`
		Source string     `json:"source"`
		Rules  []ruleView `json:"rules"`
	}
	type bucketView struct {
		Name              string            `json:"name"`
		BucketID          map[string]string `json:"bucket_id"`
		Rate              int64             `json:"rate"`
		Period            string            `json:"period,omitempty"`
		Unlimited         bool              `json:"unlimited,omitempty"`
		Burst             int64             `json:"burst,omitempty"`
		ReportingInterval string            `json:"reporting_interval"`
		AssignmentTTL     string            `json:"assignment_ttl"`
		NoAssignment      string            `json:"no_assignment"`
		ExpiredAssignment string            `json:"expired_assignment"`
		Source            string            `json:"source"`
	}
	type quotaDomainView struct {
		Domain  string       `json:"domain"`
		Source  string       `json:"source"`
		Buckets []bucketView `json:"buckets"`
	}
	view := struct {
		Digest string   `json:"digest"`
		Files  []string `json:"files"`
		Store  struct {
			Redis       string         `json:"redis,omitempty"`
			RedisEnv    string         `json:"redis_url_env,omitempty"`
			Deadline    string         `json:"deadline,omitempty"`
			FailureMode string         `json:"failure_mode,omitempty"`
			LocalShare  float64        `json:"local_share,omitempty"`
			DenyCache   *denyCacheView `json:"deny_cache,omitempty"`
			Requests    RequestLimits  `json:"request_limits"`
		} `json:"store"`
		Admin    Admin             `json:"admin"`
		Identity Identity          `json:"identity"`
		Overload *overloadView     `json:"overload,omitempty"`
		Policies []policyView      `json:"policies"`
		Domains  []domainView      `json:"domains"`
		Quotas   []quotaDomainView `json:"quota_domains,omitempty"`
	}{Digest: c.Digest, Files: c.Files, Admin: c.Admin, Identity: c.Identity}

	view.Store.Redis = RedactURL(c.Store.RedisURL)
	view.Store.RedisEnv = c.Store.RedisURLEnv
	if c.Store.Deadline > 0 {
		view.Store.Deadline = c.Store.Deadline.String()
	}
	view.Store.FailureMode = modeName(c.Store.FailureMode)
	view.Store.LocalShare = c.Store.LocalShare
	if dc := c.Store.DenyCache; dc != (DenyCache{}) {
		view.Store.DenyCache = &denyCacheView{Off: dc.Off, MaxBytes: dc.MaxBytes}
		if dc.MaxAge > 0 {
			view.Store.DenyCache.MaxAge = dc.MaxAge.String()
		}
	}
	view.Store.Requests = c.Store.RequestLimits.Or(RequestLimits{})
	if view.Identity.TrustedProxies == nil {
		view.Identity.TrustedProxies = []netip.Prefix{}
	}

	view.Overload = overloadViewOf(c.Overload)

	view.Policies = []policyView{}
	for _, p := range c.Policies {
		pv := policyView{
			Name: p.Name, Source: p.Pos.String(), Limit: lv(p.Limit), Key: p.Key.Type.String(), KeyHeader: p.Key.Header,
			Shadow: p.Shadow, FailureMode: modeName(p.FailureMode), LocalShare: p.LocalShare,
			TierHeader: p.TierHeader, DefaultTier: p.DefaultTier, OverrideCount: len(p.Overrides), IdentityTierCount: len(p.IdentityTiers),
			Criticality: criticalityName(p.Criticality),
		}
		for _, t := range p.Tiers {
			pv.Tiers = append(pv.Tiers, named{Name: t.Name, Limit: lv(t.Limit)})
		}
		for _, r := range p.Routes {
			pv.Routes = append(pv.Routes,
				named{Name: r.Pattern, Limit: lv(r.Limit), Criticality: criticalityName(r.Criticality)})
		}
		view.Policies = append(view.Policies, pv)
	}
	view.Domains = []domainView{}
	for _, d := range c.Domains {
		dv := domainView{Name: d.Name, Source: d.Pos.String(), Rules: []ruleView{}}
		for _, r := range d.Rules {
			rv := ruleView{
				Key: r.FullKey, Name: r.Name, RequestsPerUnit: r.RequestsPerUnit, Unlimited: r.Unlimited,
				Shadow: r.Shadow, QuotaMode: r.QuotaMode, Replaces: r.Replaces, Limit: lv(r.Limit), Source: r.Pos.String(),
			}
			if r.Unit != UnitUnknown {
				rv.Unit = r.Unit.String()
			}
			dv.Rules = append(dv.Rules, rv)
		}
		view.Domains = append(view.Domains, dv)
	}
	for _, d := range c.QuotaDomains {
		qv := quotaDomainView{Domain: d.Name, Source: d.Pos.String(), Buckets: []bucketView{}}
		for _, b := range d.Buckets {
			bv := bucketView{
				Name: b.Name, BucketID: map[string]string{}, Rate: b.Rate, Unlimited: b.Unlimited, Burst: b.Burst,
				ReportingInterval: b.ReportingInterval.String(), AssignmentTTL: b.TTL.String(),
				NoAssignment: b.NoAssignment.String(), ExpiredAssignment: b.Expired.String(), Source: b.Pos.String(),
			}
			if b.Period > 0 {
				bv.Period = b.Period.String()
			}
			for _, e := range b.ID {
				bv.BucketID[e.Key] = e.Value
			}
			qv.Buckets = append(qv.Buckets, bv)
		}
		view.Quotas = append(view.Quotas, qv)
	}
	return json.MarshalIndent(view, "", "  ")
}

// RedactURL returns a URL with its password replaced, for logs, errors and dumps.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// denyCacheView is Store.DenyCache in the dump, present only when the file set it.
type denyCacheView struct {
	Off      bool   `json:"off,omitempty"`
	MaxBytes int64  `json:"max_bytes,omitempty"`
	MaxAge   string `json:"max_age,omitempty"`
}

// modeName is a failure mode as the configuration writes it: "" when it inherits.
func modeName(m sluice.FailureMode) string {
	if m == sluice.FailInherit {
		return ""
	}
	return m.String()
}

// overloadView is the overload block in the dump, with every setting resolved as the
// limiter takes it.
type overloadView struct {
	Source             string `json:"source"`
	MinLimit           int    `json:"min_limit"`
	MaxLimit           int    `json:"max_limit"`
	InitialLimit       int    `json:"initial_limit"`
	Window             string `json:"window"`
	MinSamples         int    `json:"min_samples"`
	LongWindow         int    `json:"long_window"`
	Tolerance          int    `json:"tolerance"`
	Headroom           string `json:"headroom"`
	Remeasure          string `json:"remeasure"`
	CriticalReserve    int    `json:"critical_reserve"`
	DefaultReserve     int    `json:"default_reserve"`
	MaxWait            string `json:"max_wait"`
	MaxQueue           int    `json:"max_queue"`
	CriticalityHeader  string `json:"criticality_header,omitempty"`
	DefaultCriticality string `json:"default_criticality"`
}

func overloadViewOf(o *Overload) *overloadView {
	if o == nil {
		return nil
	}
	c := o.Limiter
	v := &overloadView{
		Source:             o.Pos.String(),
		MinLimit:           cmp.Or(c.MinLimit, overload.DefaultMinLimit),
		MaxLimit:           cmp.Or(c.MaxLimit, overload.DefaultMaxLimit),
		Window:             cmp.Or(c.Window, overload.DefaultWindow).String(),
		MinSamples:         cmp.Or(c.MinSamples, overload.DefaultMinSamples),
		LongWindow:         cmp.Or(c.LongWindow, overload.DefaultLongWindow),
		Tolerance:          cmp.Or(c.Tolerance, overload.DefaultTolerance),
		Headroom:           "sqrt(limit)",
		CriticalReserve:    max(cmp.Or(c.CriticalReserve, overload.DefaultCriticalReserve), 0),
		DefaultReserve:     c.DefaultReserve,
		MaxWait:            fmt.Sprintf("%d× long-term latency", overload.DefaultWaitLatencies),
		MaxQueue:           cmp.Or(c.MaxQueue, overload.DefaultMaxQueue),
		CriticalityHeader:  o.CriticalityHeader,
		DefaultCriticality: o.DefaultCriticality.String(),
	}
	initial := cmp.Or(c.InitialLimit, overload.DefaultInitialLimit)
	v.InitialLimit = min(max(initial, v.MinLimit), v.MaxLimit)
	if c.Headroom > 0 {
		v.Headroom = fmt.Sprint(c.Headroom)
	}
	switch {
	case c.Remeasure < 0:
		v.Remeasure = "off"
	default:
		v.Remeasure = cmp.Or(c.Remeasure, overload.DefaultRemeasure).String()
	}
	switch {
	case c.MaxWait < 0:
		v.MaxWait = "off"
	case c.MaxWait > 0:
		v.MaxWait = c.MaxWait.String()
	}
	return v
}

// criticalityName is a criticality as the configuration writes it: "" when unset.
func criticalityName(c *overload.Criticality) string {
	if c == nil {
		return ""
	}
	return c.String()
}
