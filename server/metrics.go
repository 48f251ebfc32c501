package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
)

// The APIs requests are counted by.
const (
	apiGRPC  = "should_rate_limit"
	apiCheck = "check"
	apiPeek  = "peek"
	apiReset = "reset"
)

// metrics are the server's own Prometheus metrics. Decisions, store latency and store
// errors by kind are the observe decorator's business; these count the APIs.
type metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	descriptors   *prometheus.CounterVec
	unknownDomain prometheus.Counter
	storeErrors   prometheus.Counter
	adminDenied   prometheus.Counter
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
	cs := []prometheus.Collector{m.requests, m.duration, m.descriptors, m.unknownDomain, m.storeErrors, m.adminDenied}
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
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(api, code string, d time.Duration) {
	m.requests.WithLabelValues(api, code).Inc()
	m.duration.WithLabelValues(api).Observe(d.Seconds())
}

// descriptor counts one answered Envoy descriptor.
func (m *metrics) descriptor(domain string, it *item) {
	rule := ""
	switch {
	case it.rule == nil:
	case it.rule.Pos.File == "":
		// A limit override from the request: its key holds request values, which must
		// not become label values.
		rule = "override"
	default:
		rule = it.rule.FullKey
	}
	var result string
	switch it.status {
	case config.NoMatch:
		result = "no_match"
	case config.Unlimited:
		result = "unlimited"
	case config.Replaced:
		result = "replaced"
	default:
		switch {
		case it.over() && it.shadow:
			result = "shadow_over_limit"
		case it.over():
			result = "over_limit"
		default:
			result = "ok"
		}
	}
	m.descriptors.WithLabelValues(domain, rule, result).Inc()
}
