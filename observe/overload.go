package observe

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/overload"
)

// OverloadMetrics are the Prometheus metrics of an overload limit (package overload) in
// front of a service: httplimit.Config.OnOverload takes Observe, and `sluice proxy`
// registers them beside its other metrics.
//
// Series:
//
//	sluice_overload_limit
//		the requests in flight the limit admits now
//	sluice_overload_inflight
//		the requests in flight (permits held)
//	sluice_overload_queued
//		the requests waiting for a permit
//	sluice_overload_admitted_total{criticality}
//		requests admitted
//	sluice_overload_shed_total{criticality,reason}
//		requests shed; reason is limit, queue_full, queue_timeout or canceled
//		(overload.Shed)
//
// criticality is critical, default or sheddable. The three gauges are read from the
// stats function at each scrape, and are absent while it reports no limit.
type OverloadMetrics struct {
	admitted *prometheus.CounterVec
	shed     *prometheus.CounterVec
	// byCrit are admitted's series by criticality, Sheddable first.
	byCrit [3]prometheus.Counter

	stats                 func() (overload.Stats, bool)
	limit, inflight, wait *prometheus.Desc
}

// The names of the overload series.
const (
	MetricOverloadLimit    = "sluice_overload_limit"
	MetricOverloadInFlight = "sluice_overload_inflight"
	MetricOverloadQueued   = "sluice_overload_queued"
	MetricOverloadAdmitted = "sluice_overload_admitted_total"
	MetricOverloadShed     = "sluice_overload_shed_total"
)

// NewOverloadMetrics creates the overload metrics and registers them on reg. stats
// returns the limit's Stats, or false while there is no limit (a `sluice proxy` whose
// configuration has no overload block). It fails if reg refuses them.
func NewOverloadMetrics(reg prometheus.Registerer, stats func() (overload.Stats, bool),
) (*OverloadMetrics, error) {
	if reg == nil || stats == nil {
		return nil, errors.New("observe: NewOverloadMetrics needs a Registerer and a stats func")
	}
	m := &OverloadMetrics{
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricOverloadAdmitted,
			Help: "Requests the overload limit admitted, by criticality " +
				"(critical, default, sheddable)."}, []string{"criticality"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricOverloadShed,
			Help: "Requests the overload limit shed (answered 503), by criticality and reason " +
				"(limit, queue_full, queue_timeout, canceled)."}, []string{"criticality", "reason"}),
		stats: stats,
		limit: prometheus.NewDesc(MetricOverloadLimit,
			"The requests in flight the adaptive overload limit admits now.", nil, nil),
		inflight: prometheus.NewDesc(MetricOverloadInFlight,
			"The requests in flight under the overload limit (permits held).", nil, nil),
		wait: prometheus.NewDesc(MetricOverloadQueued,
			"The requests waiting in the overload limit's queue for a permit.", nil, nil),
	}
	crits := []overload.Criticality{overload.Sheddable, overload.Default, overload.Critical}
	for i, c := range crits {
		m.byCrit[i] = m.admitted.WithLabelValues(c.String())
		// The series a dashboard and an alert read exist from the start, at 0.
		m.shed.WithLabelValues(c.String(), overload.ReasonLimit)
	}
	if err := register(reg, m.admitted, m.shed, gauges{m}); err != nil {
		return nil, err
	}
	return m, nil
}

func register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Observe counts one request that asked the limit for a permit, with its criticality:
// admitted when shed is nil, else shed for shed.Reason. Its signature is
// httplimit.Config.OnOverload's.
func (m *OverloadMetrics) Observe(c overload.Criticality, shed *overload.Shed) {
	if shed == nil {
		m.byCrit[min(max(c, overload.Sheddable), overload.Critical)+1].Inc()
		return
	}
	m.shed.WithLabelValues(shed.Criticality.String(), shed.Reason).Inc()
}

// gauges collects the three gauges from the stats function at each scrape.
type gauges struct{ m *OverloadMetrics }

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.m.limit
	ch <- g.m.inflight
	ch <- g.m.wait
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	st, ok := g.m.stats()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(g.m.limit, prometheus.GaugeValue, float64(st.Limit))
	ch <- prometheus.MustNewConstMetric(g.m.inflight, prometheus.GaugeValue, float64(st.InFlight))
	ch <- prometheus.MustNewConstMetric(g.m.wait, prometheus.GaugeValue, float64(st.Queued))
}
