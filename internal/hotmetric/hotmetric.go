// Package hotmetric holds Prometheus counters and histograms for paths that many
// goroutines take at once. Each child keeps its counts in stripes, one cache line each,
// and an update touches one stripe chosen at random, so that cores updating the same
// series do not take turns owning one cache line; a scrape sums the stripes.
//
// A CounterVec or HistogramVec is a prometheus.Collector whose exposition is that of
// client_golang's CounterVec or HistogramVec with the same options and the same updates:
// the same families, series, values and created timestamps, except that a histogram's
// sum may differ in its last bits (its stripes' sums are added in another order than the
// observations were). Counters count integers
// (Inc, Add); constant labels, exemplars and native histograms are not supported.
package hotmetric

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stripes is the number of stripes of a child: a power of two, a few per core of the
// machines the service runs on.
const stripes = 8

// stripe picks the stripe of one update.
func stripe() int { return int(rand.Uint32() & (stripes - 1)) }

// vec holds the children of a vector by their label values.
type vec[C any] struct {
	desc   *prometheus.Desc
	labels int
	mu     sync.RWMutex
	m      map[string]*child[C]
	make   func() *C
}

type child[C any] struct {
	values  []string
	created time.Time
	c       *C
}

func newVec[C any](desc *prometheus.Desc, labels int, mk func() *C) vec[C] {
	return vec[C]{desc: desc, labels: labels, m: map[string]*child[C]{}, make: mk}
}

// with returns the child of lvs, making it on first use. It panics, as client_golang's
// WithLabelValues does, when the number of values is not the number of labels.
func (v *vec[C]) with(lvs []string) *C {
	if len(lvs) != v.labels {
		panic("hotmetric: wrong number of label values")
	}
	k := strings.Join(lvs, "\xff")
	v.mu.RLock()
	ch := v.m[k]
	v.mu.RUnlock()
	if ch != nil {
		return ch.c
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if ch := v.m[k]; ch != nil {
		return ch.c
	}
	ch = &child[C]{values: slices.Clone(lvs), created: time.Now(), c: v.make()}
	v.m[k] = ch
	return ch.c
}

// children returns the children made so far.
func (v *vec[C]) children() []*child[C] {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]*child[C], 0, len(v.m))
	for _, ch := range v.m {
		out = append(out, ch)
	}
	return out
}

// CounterVec is a vector of striped counters: client_golang's CounterVec for hot paths.
type CounterVec struct{ v vec[Counter] }

// Counter is one striped counter. It is safe for concurrent use.
type Counter struct {
	s [stripes]struct {
		n atomic.Uint64
		_ [56]byte // one cache line per stripe
	}
}

// Inc adds 1.
func (c *Counter) Inc() { c.s[stripe()].n.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.s[stripe()].n.Add(n) }

// Value returns the count.
func (c *Counter) Value() uint64 {
	var n uint64
	for i := range c.s {
		n += c.s[i].n.Load()
	}
	return n
}

// NewCounterVec returns a CounterVec with the name, help and labels of
// prometheus.NewCounterVec(opts, labels). opts.ConstLabels must be empty.
func NewCounterVec(opts prometheus.CounterOpts, labels []string) *CounterVec {
	d := prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name), opts.Help, labels, nil)
	return &CounterVec{v: newVec(d, len(labels), func() *Counter { return new(Counter) })}
}

// WithLabelValues returns the counter of the label values lvs, made on first use.
// Resolve it once and keep it: the lookup is what a hot path must not do.
func (cv *CounterVec) WithLabelValues(lvs ...string) *Counter { return cv.v.with(lvs) }

// Describe implements prometheus.Collector.
func (cv *CounterVec) Describe(ch chan<- *prometheus.Desc) { ch <- cv.v.desc }

// Collect implements prometheus.Collector.
func (cv *CounterVec) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cv.v.children() {
		ch <- prometheus.MustNewConstMetricWithCreatedTimestamp(cv.v.desc, prometheus.CounterValue, float64(c.c.Value()), c.created, c.values...)
	}
}

// HistogramVec is a vector of striped histograms: client_golang's HistogramVec for hot
// paths.
type HistogramVec struct {
	v       vec[Histogram]
	buckets []float64
}

// Histogram is one striped histogram. It is safe for concurrent use.
type Histogram struct {
	upper   []float64 // the buckets' upper bounds, ascending, without +Inf
	stripes []histStripe
}

// histStripe is one stripe: counts[i] observations in bucket i (the last is +Inf), and
// the sum of all as float64 bits. Stripes are padded apart.
type histStripe struct {
	counts []atomic.Uint64
	sum    atomic.Uint64
	_      [40]byte
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i := 0
	for i < len(h.upper) && v > h.upper[i] {
		i++
	}
	s := &h.stripes[stripe()]
	s.counts[i].Add(1)
	for {
		old := s.sum.Load()
		if s.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// NewHistogramVec returns a HistogramVec with the name, help, buckets and labels of
// prometheus.NewHistogramVec(opts, labels). opts.ConstLabels and the native histogram
// options must be unset; nil Buckets are prometheus.DefBuckets.
func NewHistogramVec(opts prometheus.HistogramOpts, labels []string) *HistogramVec {
	d := prometheus.NewDesc(prometheus.BuildFQName(opts.Namespace, opts.Subsystem, opts.Name), opts.Help, labels, nil)
	b := opts.Buckets
	if b == nil {
		b = prometheus.DefBuckets
	}
	b = slices.Clone(b)
	if n := len(b); n > 0 && math.IsInf(b[n-1], 1) {
		b = b[:n-1] // +Inf is implicit, as in client_golang
	}
	hv := &HistogramVec{buckets: b}
	hv.v = newVec(d, len(labels), func() *Histogram {
		h := &Histogram{upper: b, stripes: make([]histStripe, stripes)}
		for i := range h.stripes {
			h.stripes[i].counts = make([]atomic.Uint64, len(b)+1)
		}
		return h
	})
	return hv
}

// WithLabelValues returns the histogram of the label values lvs, made on first use.
// Resolve it once and keep it: the lookup is what a hot path must not do.
func (hv *HistogramVec) WithLabelValues(lvs ...string) *Histogram { return hv.v.with(lvs) }

// Describe implements prometheus.Collector.
func (hv *HistogramVec) Describe(ch chan<- *prometheus.Desc) { ch <- hv.v.desc }

// Collect implements prometheus.Collector.
func (hv *HistogramVec) Collect(ch chan<- prometheus.Metric) {
	for _, c := range hv.v.children() {
		h := c.c
		counts := make([]uint64, len(h.upper)+1)
		var sum float64
		for i := range h.stripes {
			s := &h.stripes[i]
			for j := range s.counts {
				counts[j] += s.counts[j].Load()
			}
			sum += math.Float64frombits(s.sum.Load())
		}
		buckets := make(map[float64]uint64, len(h.upper))
		var cum uint64
		for j, ub := range h.upper {
			cum += counts[j]
			buckets[ub] = cum
		}
		count := cum + counts[len(h.upper)]
		ch <- prometheus.MustNewConstHistogramWithCreatedTimestamp(hv.v.desc, count, sum, buckets, c.created, c.values...)
	}
}

var (
	_ prometheus.Collector = (*CounterVec)(nil)
	_ prometheus.Collector = (*HistogramVec)(nil)
)
