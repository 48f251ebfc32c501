package observe

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/overload"
)

func TestOverloadMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var st overload.Stats
	on := false
	m, err := NewOverloadMetrics(reg, func() (overload.Stats, bool) { return st, on })
	if err != nil {
		t.Fatal(err)
	}
	crit := func(c string) map[string]string { return map[string]string{"criticality": c} }
	shed := func(c, reason string) map[string]string { return map[string]string{"criticality": c, "reason": reason} }
	// Without a limit there are no gauges, and the series the dashboard reads are 0.
	if v := metricValue(t, reg, MetricOverloadLimit, nil); v != -1 {
		t.Errorf("%s = %v without a limit, want absent", MetricOverloadLimit, v)
	}
	for _, c := range []string{"critical", "default", "sheddable"} {
		if v := metricValue(t, reg, MetricOverloadShed, shed(c, "limit")); v != 0 {
			t.Errorf("shed %s = %v, want 0", c, v)
		}
		if v := metricValue(t, reg, MetricOverloadAdmitted, crit(c)); v != 0 {
			t.Errorf("admitted %s = %v, want 0", c, v)
		}
	}

	st, on = overload.Stats{Limit: 10, InFlight: 7, Queued: 2}, true
	m.Observe(overload.Critical, nil)
	m.Observe(overload.Sheddable, nil)
	m.Observe(overload.Sheddable, nil)
	m.Observe(overload.Sheddable, &overload.Shed{Criticality: overload.Sheddable, Reason: overload.ReasonLimit})
	m.Observe(overload.Default, &overload.Shed{Criticality: overload.Default, Reason: overload.ReasonQueueTimeout})
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{MetricOverloadLimit, nil, 10},
		{MetricOverloadInFlight, nil, 7},
		{MetricOverloadQueued, nil, 2},
		{MetricOverloadAdmitted, crit("critical"), 1},
		{MetricOverloadAdmitted, crit("default"), 0},
		{MetricOverloadAdmitted, crit("sheddable"), 2},
		{MetricOverloadShed, shed("sheddable", "limit"), 1},
		{MetricOverloadShed, shed("default", "queue_timeout"), 1},
		{MetricOverloadShed, shed("critical", "limit"), 0},
	} {
		if v := metricValue(t, reg, c.name, c.labels); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if _, err := NewOverloadMetrics(reg, func() (overload.Stats, bool) { return st, on }); err == nil {
		t.Error("registering twice succeeded")
	}
}
