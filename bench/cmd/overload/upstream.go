package main

import (
	"math"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"
)

// upstream is a service of fixed capacity: workers requests are served at once, each for
// a service time drawn from a lognormal distribution (median, sigma), and at most queue
// more wait for a worker; a request beyond those is answered 503 at once. Serving is
// sleeping, so that capacity does not depend on the CPU the load generator leaves: it is
// workers ÷ the mean service time, whatever else runs on the machine.
//
// Like most services, it does not notice a client that has given up: a request it has
// queued is served to the end, so work done for a client that timed out is capacity lost.
type upstream struct {
	workers chan struct{}
	queue   int64
	median  time.Duration
	sigma   float64

	slow    atomic.Bool  // service times are doubled
	waiting atomic.Int64 // requests queued for a worker
	busy    atomic.Int64 // requests being served
}

func newUpstream(workers, queue int, median time.Duration, sigma float64) *upstream {
	return &upstream{workers: make(chan struct{}, workers), queue: int64(queue), median: median, sigma: sigma}
}

// capacity is the upstream's throughput at full speed in requests a second: workers over
// the lognormal's mean, median·exp(σ²/2).
func (u *upstream) capacity() float64 {
	mean := u.median.Seconds() * math.Exp(u.sigma*u.sigma/2)
	return float64(cap(u.workers)) / mean
}

// serviceTime draws one request's service time.
func (u *upstream) serviceTime() time.Duration {
	d := time.Duration(float64(u.median) * math.Exp(u.sigma*rand.NormFloat64()))
	if u.slow.Load() {
		d *= 2
	}
	return d
}

// headerRejected names, on a 503, what refused the request: "upstream" for the upstream's
// full queue, the protection's name for a shed.
const headerRejected = "X-Rejected-By"

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if u.waiting.Add(1) > u.queue {
		u.waiting.Add(-1)
		w.Header().Set(headerRejected, "upstream")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	u.workers <- struct{}{} // senders on a channel are served in order: a FIFO queue
	u.waiting.Add(-1)
	u.busy.Add(1)
	time.Sleep(u.serviceTime())
	u.busy.Add(-1)
	<-u.workers
	w.WriteHeader(http.StatusOK)
}

// inflight is the number of requests the upstream holds, served or queued.
func (u *upstream) inflight() int { return int(u.busy.Load() + u.waiting.Load()) }
