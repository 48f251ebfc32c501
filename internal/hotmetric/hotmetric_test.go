package hotmetric

import (
	"bytes"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// scrape returns the text exposition of reg.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestExpositionIsClientGolangs: the same updates, made from several goroutines, through
// client_golang's vectors and through this package's give the same scrape, byte for byte.
// (Observed values are exact binary fractions, so that their sum does not depend on the
// order in which they are added.)
func TestExpositionIsClientGolangs(t *testing.T) {
	copts := prometheus.CounterOpts{Namespace: "ns", Name: "requests_total", Help: "Requests, by api and code."}
	hopts := prometheus.HistogramOpts{Name: "duration_seconds", Help: "Time \"taken\".\nSecond line.", Buckets: []float64{0.00048828125, 0.0009765625, .25, 1}}
	dopts := prometheus.HistogramOpts{Name: "default_buckets", Help: "Default buckets."}

	ref, hot := prometheus.NewRegistry(), prometheus.NewRegistry()
	rc, rh, rd := prometheus.NewCounterVec(copts, []string{"api", "code"}), prometheus.NewHistogramVec(hopts, []string{"api"}), prometheus.NewHistogramVec(dopts, nil)
	hc, hh, hd := NewCounterVec(copts, []string{"api", "code"}), NewHistogramVec(hopts, []string{"api"}), NewHistogramVec(dopts, nil)
	ref.MustRegister(rc, rh, rd)
	hot.MustRegister(hc, hh, hd)

	values := []float64{0, 0.000244140625, 0.00048828125, 0.0009765625, 0.125, 0.25, 0.5, 1, 2, 1024}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				api := []string{"check", "should_rate_limit", `we"ird\`}[(g+i)%3]
				code := []string{"ok", "over_limit"}[i%2]
				rc.WithLabelValues(api, code).Inc()
				hc.WithLabelValues(api, code).Inc()
				rc.WithLabelValues(api, "error").Add(3)
				hc.WithLabelValues(api, "error").Add(3)
				v := values[(g*7+i)%len(values)]
				rh.WithLabelValues(api).Observe(v)
				hh.WithLabelValues(api).Observe(v)
				rd.WithLabelValues().Observe(v)
				hd.WithLabelValues().Observe(v)
			}
		})
	}
	wg.Wait()
	// A child made and never updated is exposed at zero by both.
	rc.WithLabelValues("peek", "ok")
	hc.WithLabelValues("peek", "ok")
	rh.WithLabelValues("peek")
	hh.WithLabelValues("peek")

	want, got := scrape(t, ref), scrape(t, hot)
	if got != want {
		t.Errorf("exposition differs\n--- hotmetric:\n%s\n--- client_golang:\n%s", got, want)
	}
}

// TestWrongLabelCount: a wrong number of label values panics, as in client_golang.
func TestWrongLabelCount(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	NewCounterVec(prometheus.CounterOpts{Name: "x", Help: "x"}, []string{"a"}).WithLabelValues("1", "2")
}

func BenchmarkCounterInc(b *testing.B) {
	c := NewCounterVec(prometheus.CounterOpts{Name: "x", Help: "x"}, []string{"a"}).WithLabelValues("1")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}

func BenchmarkHistogramObserve(b *testing.B) {
	h := NewHistogramVec(prometheus.HistogramOpts{Name: "x", Help: "x"}, nil).WithLabelValues()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Observe(0.003)
		}
	})
}
