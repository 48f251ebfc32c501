package main

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// phase is one stretch of a run at one offered load.
type phase struct {
	Name     string        `json:"name"`
	Load     float64       `json:"load"`     // offered load, a multiple of the upstream's full-speed capacity
	Critical float64       `json:"critical"` // critical arrivals a second
	Shed     float64       `json:"sheddable"`
	Duration time.Duration `json:"duration_ns"`
	Slow     bool          `json:"slow"` // the upstream serves at half speed
}

// outcome is how one request ended, as its client saw it.
type outcome uint8

const (
	ok         outcome = iota // 200 before the client's timeout
	shedded                   // 503 from the protection
	rejected                  // 503 from the upstream's full queue
	timedOut                  // no answer within the client's timeout
	failed                    // anything else: a refused connection, an unexpected status
	overflowed                // never sent: the generator already had -max-outstanding requests open
)

// record is one request: when it was due (Poisson arrival), its class, how it ended and
// its latency measured from when it was due, so that a generator running late charges
// the delay to the system under test rather than hiding it.
type record struct {
	due     time.Duration // since the start of the run
	latency time.Duration
	class   criticality
	outcome outcome
}

// generator sends open-loop Poisson arrivals: each request goes out when it is due,
// whether or not earlier ones have been answered.
type generator struct {
	client         *http.Client
	url            string
	timeout        time.Duration
	maxOutstanding int64
	maxRequests    int64

	mu      sync.Mutex
	records []record
	open    atomic.Int64
	sent    atomic.Int64
	wg      sync.WaitGroup
}

func newGenerator(url string, timeout time.Duration, maxOutstanding, maxRequests int64) *generator {
	tr := &http.Transport{
		MaxIdleConns:        int(maxOutstanding),
		MaxIdleConnsPerHost: int(maxOutstanding),
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &generator{client: &http.Client{Transport: tr}, url: url, timeout: timeout,
		maxOutstanding: maxOutstanding, maxRequests: maxRequests}
}

// run sends the phases in order, calling atPhase as each begins, and returns once every
// request sent has ended. start is the run's time zero.
func (g *generator) run(start time.Time, phases []phase, atPhase func(int)) {
	next := time.Duration(0)
	end := time.Duration(0)
	for i, p := range phases {
		atPhase(i)
		end += p.Duration
		rate := p.Critical + p.Shed
		for rate > 0 {
			next += time.Duration(rand.ExpFloat64() / rate * float64(time.Second))
			if next >= end {
				break
			}
			if g.sent.Load() >= g.maxRequests {
				break
			}
			if wait := time.Until(start.Add(next)); wait > 0 {
				time.Sleep(wait)
			}
			class := sheddable
			if rand.Float64()*rate < p.Critical {
				class = critical
			}
			g.send(start, next, class)
		}
		next = end
		if wait := time.Until(start.Add(end)); wait > 0 {
			time.Sleep(wait)
		}
	}
	g.wg.Wait()
}

func (g *generator) send(start time.Time, due time.Duration, class criticality) {
	g.sent.Add(1)
	if g.open.Add(1) > g.maxOutstanding {
		g.open.Add(-1)
		g.add(record{due: due, class: class, outcome: overflowed})
		return
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer g.open.Add(-1)
		o := g.do(class)
		g.add(record{due: due, latency: time.Since(start.Add(due)), class: class, outcome: o})
	}()
}

func (g *generator) do(class criticality) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url, nil)
	if err != nil {
		return failed
	}
	req.Header.Set(headerCriticality, class.String())
	resp, err := g.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return timedOut
		}
		return failed
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return timedOut
	case err != nil:
		return failed
	case resp.StatusCode == http.StatusOK:
		return ok
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(headerRejected) == "upstream":
		return rejected
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(headerRejected) != "":
		return shedded
	}
	return failed
}

func (g *generator) add(r record) {
	g.mu.Lock()
	g.records = append(g.records, r)
	g.mu.Unlock()
}
