package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
)

// The APIs requests are counted by.
const (
	apiGRPC    = "should_rate_limit"
	apiCheck   = "check"
	apiPeek    = "peek"
	apiUsage   = "usage"
	apiReset   = "reset"
	apiRelease = "release"
	apiSettle  = "settle"
)

// metrics are the server's own Prometheus metrics. Decisions, store latency and store
// errors by kind are the observe decorator's business; these count the APIs.
type metrics struct {
	// byAPI holds the children of requests and duration for the known APIs and codes,
	// so that the hot path does no label hashing or validation.
	byAPI map[string]*apiMetrics
	// byRule caches the descriptor counters by (domain, rule, result).
	byRule sync.Map

	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	descriptors   *prometheus.CounterVec
	unknownDomain prometheus.Counter
	storeErrors   prometheus.Counter
	adminDenied   prometheus.Counter
	// overrideChanges counts changes of the overrides API, by action (set, delete,
	// expire).
	overrideChanges *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, w *config.Watcher) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_server_requests_total",
			Help: "Requests answered, by API (should_rate_limit, check, peek, reset) and outcome (ok, over_limit, invalid, unavailable, error, denied).",
		}, []string{"api", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_server_request_duration_seconds",
			Help:    "Time to answer a request, by API.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"api"}),
		descriptors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_envoy_descriptors_total",
			Help: "Envoy descriptors answered, by domain, rule (the reference implementation's full key of the configured rule) and result (ok, over_limit, shadow_over_limit, unlimited, no_match, replaced).",
		}, []string{"domain", "rule", "result"}),
		unknownDomain: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_envoy_unknown_domain_total",
			Help: "ShouldRateLimit requests for a domain the configuration does not have (answered OK).",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_store_errors_total",
			Help: "Requests that could not be decided because the store failed and no failure mode decided instead.",
		}),
		adminDenied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_server_admin_denied_total",
			Help: "Admin requests refused for a missing or wrong token.",
		}),
	}
	m.overrideChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_server_override_changes_total",
		Help: "Changes of the limits set at run time (/v1/overrides), by action: set, delete, expire.",
	}, []string{"action"})
	for _, a := range []string{"set", "delete", "expire"} {
		m.overrideChanges.WithLabelValues(a)
	}
	cs := []prometheus.Collector{m.requests, m.duration, m.descriptors, m.unknownDomain, m.storeErrors, m.adminDenied, m.overrideChanges}
	if w != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "sluice_config_reloads_total",
				Help: "Configuration reloads that put a new configuration in force.",
			}, func() float64 { return float64(w.Reloads()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "sluice_config_reload_rejected_total",
				Help: "Configuration reloads rejected (invalid or unreadable); the previous configuration stayed in force.",
			}, func() float64 { return float64(w.Rejected()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "sluice_config_last_reload_successful",
				Help: "1 when the last configuration reload succeeded (or none was tried), 0 when it was rejected.",
			}, func() float64 {
				if w.LastError() != nil {
					return 0
				}
				return 1
			}),
		)
	}
	if err := register(reg, cs); err != nil {
		return nil, err
	}
	m.byAPI = map[string]*apiMetrics{}
	for _, api := range []string{apiGRPC, apiCheck, apiPeek, apiUsage, apiReset, apiRelease, apiSettle} {
		am := &apiMetrics{codes: map[string]prometheus.Counter{}, duration: m.duration.WithLabelValues(api)}
		for _, code := range []string{"ok", "over_limit", "invalid", "unavailable", "error"} {
			am.codes[code] = m.requests.WithLabelValues(api, code)
		}
		m.byAPI[api] = am
	}
	return m, nil
}

// register registers cs with reg, stopping at the first it refuses.
func register(reg prometheus.Registerer, cs []prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

type apiMetrics struct {
	codes    map[string]prometheus.Counter
	duration prometheus.Observer
}

func (m *metrics) observe(api, code string, d time.Duration) {
	am := m.byAPI[api]
	c, ok := am.codes[code]
	if !ok {
		c = m.requests.WithLabelValues(api, code)
	}
	c.Inc()
	am.duration.Observe(d.Seconds())
}

// ruleKey identifies one descriptor counter by its label values: rule is the rule's
// full key, "override" for a limit override (its key holds request values, which must
// not become label values), "" for no rule.
type ruleKey struct {
	domain, rule, result string
}

// descriptor counts one answered Envoy descriptor.
func (m *metrics) descriptor(domain string, it *item) {
	k := ruleKey{domain: domain}
	switch {
	case it.rule == nil:
	case it.rule.Pos.File == "":
		k.rule = "override" // made from the request's limit override
	default:
		k.rule = it.rule.FullKey
	}
	switch it.status {
	case config.NoMatch:
		k.result = "no_match"
	case config.Unlimited:
		k.result = "unlimited"
	case config.Replaced:
		k.result = "replaced"
	default:
		switch {
		case it.Over() && it.Shadow:
			k.result = "shadow_over_limit"
		case it.Over():
			k.result = "over_limit"
		default:
			k.result = "ok"
		}
	}
	if c, ok := m.byRule.Load(k); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.descriptors.WithLabelValues(k.domain, k.rule, k.result)
	m.byRule.Store(k, c)
	c.Inc()
}
