package server

import (
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

// metrics are the server's Prometheus metrics of its APIs (the observe decorator has the
// decisions').
type metrics struct {
	// grpc and byAPI hold the APIs' children, resolved once.
	grpc  *apiMetrics
	byAPI map[string]*apiMetrics

	descriptors     *prometheus.CounterVec
	unknownDomain   prometheus.Counter
	storeErrors     prometheus.Counter
	adminDenied     prometheus.Counter
	overrideChanges *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, w *config.Watcher) (*metrics, error) {
	requests := newCounterVec("sluice_server_requests_total", "Requests answered, by API (should_rate_limit, check, peek, reset) and outcome (ok, over_limit, invalid, unavailable, error, denied).", "api", "code")
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_server_request_duration_seconds",
		Help:    "Time to answer a request, by API.",
		Buckets: []float64{.0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, 1},
	}, []string{"api"})
	m := &metrics{
		descriptors:     newCounterVec("sluice_envoy_descriptors_total", "Envoy descriptors answered, by domain, rule (the reference implementation's full key of the configured rule) and result (ok, over_limit, shadow_over_limit, unlimited, no_match, replaced).", "domain", "rule", "result"),
		unknownDomain:   newCounter("sluice_envoy_unknown_domain_total", "ShouldRateLimit requests for a domain the configuration does not have (answered OK)."),
		storeErrors:     newCounter("sluice_server_store_errors_total", "Requests that could not be decided because the store failed and no failure mode decided instead."),
		adminDenied:     newCounter("sluice_server_admin_denied_total", "Admin requests refused for a missing or wrong token."),
		overrideChanges: newCounterVec("sluice_server_override_changes_total", "Changes of the limits set at run time (/v1/overrides), by action: set, delete, expire.", "action"),
	}
	for _, a := range []string{"set", "delete", "expire"} {
		m.overrideChanges.WithLabelValues(a)
	}
	cs := []prometheus.Collector{requests, duration, m.descriptors, m.unknownDomain, m.storeErrors, m.adminDenied, m.overrideChanges}
	if w != nil {
		cs = append(cs,
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_config_reloads_total", Help: "Configuration reloads that put a new configuration in force."}, func() float64 { return float64(w.Reloads()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_config_reload_rejected_total", Help: "Configuration reloads rejected (invalid or unreadable); the previous configuration stayed in force."}, func() float64 { return float64(w.Rejected()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_config_last_reload_successful", Help: "1 when the last configuration reload succeeded (or none was tried), 0 when it was rejected."}, func() float64 {
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
		am := &apiMetrics{duration: duration.WithLabelValues(api)}
		for c, name := range codeNames {
			am.codes[c] = requests.WithLabelValues(api, name)
		}
		m.byAPI[api] = am
	}
	m.grpc = m.byAPI[apiGRPC]
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

// The outcomes requests are counted by: the code label of sluice_server_requests_total.
const (
	codeOK = iota
	codeOverLimit
	codeInvalid
	codeUnavailable
	codeError
	numCodes
)

var codeNames = [numCodes]string{"ok", "over_limit", "invalid", "unavailable", "error"}

// apiMetrics are one API's children of requests, by code, and of duration.
type apiMetrics struct {
	codes    [numCodes]prometheus.Counter
	duration prometheus.Observer
}

// observe counts one request answered with code, started at start (a monotonic
// reading).
func (am *apiMetrics) observe(code int, start time.Duration) {
	am.codes[code].Inc()
	am.duration.Observe((monotonic() - start).Seconds())
}

// processStart is the origin of monotonic.
var processStart = time.Now()

// monotonic reads the monotonic clock alone: the time since the process started.
func monotonic() time.Duration { return time.Since(processStart) }

// newCounter, newCounterVec and newGaugeVec make metrics of a name, help and labels.
func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func newCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func newGaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}
