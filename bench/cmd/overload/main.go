// Command overload measures how protections in front of an overloaded service keep it
// serving: an upstream of fixed capacity on loopback HTTP, an open-loop load stepped
// 0.5× → 1× → 2× → 4× of that capacity, half of it critical and half sheddable (the
// X-Criticality header), and then the upstream slowing to half its speed while the 4×
// load goes on. The protections run one after the other on the same load, each with an
// upstream of its own:
//
//	none      every request reaches the upstream
//	fixed     at most -fixed requests in flight (a semaphore), the rest shed at once
//	adaptive  failsafe-go's adaptivelimiter.PriorityLimiter: a concurrency limit learned
//	          from latency, and a queue from which sheddable requests are rejected first
//	          (labelled failsafe-go in the output)
//	sluice    sluice's overload.Limiter: a concurrency limit learned from latency, a
//	          share of it reserved for critical requests, which wait for a permit while
//	          sheddable ones are shed at once
//
// The -fs-* flags are the adaptive limiter's settings; their defaults are the ones that
// met issue 42's targets here, which differ from failsafe-go's own (each flag's help
// names both). Sheddable requests never wait for a permit (-fs-max-wait-sheddable 0):
// with failsafe-go's queue alone, sheddable arrivals keep the queue near the cap at which
// every priority is rejected, and critical requests are shed with them. The -sl-* flags
// set overload.Config; 0 leaves a field at the package's default.
//
// A protection sheds with 503, Retry-After and the temporary-reduced-capacity problem
// type. The upstream (see upstream) has -workers workers, lognormal service times
// (-median, -sigma) and a queue of -queue; it serves a request to the end even when the
// client has given up. Each client waits -timeout for its answer and does not retry.
//
// For each protection and phase it reports goodput (200s answered during the phase, a
// second), and of the requests due in it the success rate and p50/p99 latency of
// successes of each class (from when the request was due), the
// requests shed, and the limit and in-flight requests sampled every -sample; it prints a
// table, evaluates issue 42's targets, and writes JSON (-json) and an HTML report with a
// plot of limit and in-flight requests over time for each protection (-html).
//
//	cd bench && go run ./cmd/overload                                  # about 2 minutes
//	cd bench && go run ./cmd/overload -step 10s -slow 30s              # longer
//	cd bench && go run ./cmd/overload -only sluice -critical-max 0.5   # critical capped at half the capacity
//
// Serving is sleeping, so the upstream's capacity does not depend on the CPU the load
// generator leaves it; the generator, the protections and the upstream share one process.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

var (
	workers     = flag.Int("workers", 16, "the upstream's workers: requests served at once")
	median      = flag.Duration("median", 100*time.Millisecond, "the median service time at full speed")
	sigma       = flag.Float64("sigma", 0.5, "the lognormal service time's σ (of its logarithm)")
	queue       = flag.Int("queue", 1024, "the upstream's queue: requests waiting for a worker beyond which it answers 503")
	steps       = flag.String("steps", "0.5,1,2,4", "offered loads, multiples of the capacity, each run for -step")
	step        = flag.Duration("step", 6*time.Second, "how long each load step lasts")
	slow        = flag.Duration("slow", 16*time.Second, "how long the last step's load goes on after the upstream halves its speed (0: it never does)")
	criticalMax = flag.Float64("critical-max", 0, "cap the critical arrivals at this multiple of the capacity, the rest of each step sheddable (0: half of every step is critical)")
	timeout     = flag.Duration("timeout", 2*time.Second, "each client's timeout")
	fixed       = flag.Int("fixed", 0, "the fixed protection's limit (0: -workers, the upstream's own concurrency)")
	only        = flag.String("only", "none,fixed,adaptive,sluice", "the protections to run, in this order")
	sample      = flag.Duration("sample", 100*time.Millisecond, "how often the limit and in-flight requests are sampled")
	settleIn    = flag.Duration("settle", 10*time.Second, "after the upstream halves, the limit must stay within ±-swing of where it ends within this long")
	swing       = flag.Float64("swing", 0.20, "the limit's allowed swing once settled, a fraction")
	maxOut      = flag.Int64("max-outstanding", 8192, "requests open at once beyond which the generator counts an arrival as overflowed rather than send it")
	maxReq      = flag.Int64("max-requests", 2_000_000, "requests sent per protection at most")
	jsonOut     = flag.String("json", "overload.json", "write the results as JSON here (empty: not at all)")
	htmlOut     = flag.String("html", "overload.html", "write the HTML report here (empty: not at all)")

	fs adaptiveSettings
	sl sluiceSettings
)

func init() {
	flag.UintVar(&fs.MinLimit, "fs-min", 1, "adaptive: WithLimits min")
	flag.UintVar(&fs.MaxLimit, "fs-max", 200, "adaptive: WithLimits max")
	flag.UintVar(&fs.InitialLimit, "fs-initial", 20, "adaptive: WithLimits initial")
	flag.Float64Var(&fs.MaxLimitFactor, "fs-factor", 2, "adaptive: WithMaxLimitFactor, the limit's cap as a multiple of the requests in flight (failsafe-go's default: 5)")
	flag.DurationVar(&fs.StabilizeWindow, "fs-stabilize", 0, "adaptive: WithMaxLimitStabilizationWindow (0: off)")
	flag.DurationVar(&fs.WindowMin, "fs-window-min", 250*time.Millisecond, "adaptive: WithRecentWindow min duration, the shortest time between two changes of the limit (failsafe-go's default: 1s)")
	flag.DurationVar(&fs.WindowMax, "fs-window-max", 30*time.Second, "adaptive: WithRecentWindow max duration")
	flag.UintVar(&fs.WindowSamples, "fs-samples", 50, "adaptive: WithRecentWindow min samples")
	flag.Float64Var(&fs.Quantile, "fs-quantile", 0.9, "adaptive: WithRecentQuantile")
	flag.UintVar(&fs.BaselineAge, "fs-baseline", 50, "adaptive: WithBaselineWindow age, in recent windows: how slowly the baseline latency follows the recent one (failsafe-go's default: 10)")
	flag.UintVar(&fs.Correlation, "fs-correlation", 50, "adaptive: WithCorrelationWindow size")
	flag.Float64Var(&fs.QueueInitial, "fs-queue-initial", 1, "adaptive: WithQueueing initial rejection factor: queued requests, a multiple of the limit, at which the lowest priorities begin to be rejected (BuildPrioritized's default: 2)")
	flag.Float64Var(&fs.QueueMax, "fs-queue-max", 2, "adaptive: WithQueueing max rejection factor: queued requests, a multiple of the limit, at which every priority is rejected (BuildPrioritized's default: 3)")
	flag.DurationVar(&fs.MaxWait, "fs-max-wait", -1, "adaptive: the longest a request waits in the queue for a permit, AcquirePermitWithMaxWait's argument (< 0: until its client gives up)")
	flag.DurationVar(&fs.ShedWait, "fs-max-wait-sheddable", 0, "adaptive: the same for sheddable requests (0: never queue, take a permit only when one is free; < 0: -fs-max-wait)")
	flag.DurationVar(&fs.Calibration, "fs-calibrate", 10*time.Millisecond, "adaptive: the prioritizer's calibration interval (ScheduleCalibrations), how often the priority below which requests are rejected is recomputed from the queue")
}

func init() {
	flag.IntVar(&sl.MinLimit, "sl-min", 0, "sluice: Config.MinLimit (0: overload's default)")
	flag.IntVar(&sl.MaxLimit, "sl-max", 0, "sluice: Config.MaxLimit (0: overload's default)")
	flag.IntVar(&sl.InitialLimit, "sl-initial", 0, "sluice: Config.InitialLimit (0: overload's default)")
	flag.DurationVar(&sl.Window, "sl-window", 0, "sluice: Config.Window, how often the limit is recomputed (0: overload's default)")
	flag.IntVar(&sl.MinSamples, "sl-samples", 0, "sluice: Config.MinSamples, latency samples a window needs (0: overload's default)")
	flag.IntVar(&sl.LongWindow, "sl-long", 0, "sluice: Config.LongWindow, windows the long-term latency averages over (0: overload's default)")
	flag.IntVar(&sl.Tolerance, "sl-tolerance", 0, "sluice: Config.Tolerance, percent (0: overload's default)")
	flag.IntVar(&sl.Headroom, "sl-headroom", 0, "sluice: Config.Headroom, requests (0: the square root of the limit)")
	flag.DurationVar(&sl.Remeasure, "sl-remeasure", 0, "sluice: Config.Remeasure, the period of re-measuring the latency without queueing (0: overload's default; < 0: never)")
	flag.IntVar(&sl.CriticalReserve, "sl-critical-reserve", 0, "sluice: Config.CriticalReserve, percent (0: overload's default; < 0: none)")
	flag.IntVar(&sl.DefaultReserve, "sl-default-reserve", 0, "sluice: Config.DefaultReserve, percent")
	flag.DurationVar(&sl.MaxWait, "sl-max-wait", 0, "sluice: Config.MaxWait, how long a critical request waits for a permit (0: overload's default; < 0: never)")
	flag.IntVar(&sl.MaxQueue, "sl-max-queue", 0, "sluice: Config.MaxQueue (0: overload's default)")
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "overload:", err)
		os.Exit(1)
	}
}

// sampleAt is one sample of a protection and its upstream.
type sampleAt struct {
	T        float64 `json:"t"` // seconds since the run began
	Limit    int     `json:"limit"`
	Inflight int     `json:"inflight"` // through the protection
	Queued   int     `json:"queued"`   // waiting in the protection
	Busy     int     `json:"upstream_busy"`
	Waiting  int     `json:"upstream_waiting"`
}

// runResult is one protection's run.
type runResult struct {
	Protection string      `json:"protection"`
	Phases     []phaseStat `json:"phases"`
	Samples    []sampleAt  `json:"samples"`
	Settle     *settling   `json:"settle,omitempty"`
	Series     []second    `json:"per_second"`
	Seconds    float64     `json:"seconds"`
	records    []record
}

func run() error {
	up := newUpstream(*workers, *queue, *median, *sigma)
	capacity := up.capacity()
	phases, err := plan(capacity)
	if err != nil {
		return err
	}
	if *fixed == 0 {
		*fixed = *workers
	}
	var prots []protection
	for _, name := range strings.Split(*only, ",") {
		switch strings.TrimSpace(name) {
		case "none":
			prots = append(prots, unprotected())
		case "fixed":
			prots = append(prots, fixedLimit(*fixed))
		case "adaptive", "failsafe-go":
			prots = append(prots, adaptive(fs))
		case "sluice":
			p, err := sluiceLimit(sl)
			if err != nil {
				return fmt.Errorf("-sl-*: %w", err)
			}
			prots = append(prots, p)
		default:
			return fmt.Errorf("-only: unknown protection %q", name)
		}
	}
	rep := report{
		Capacity: capacity, Workers: *workers, Median: *median, Sigma: *sigma, Queue: *queue,
		Timeout: *timeout, Fixed: *fixed, Adaptive: fs, Sluice: sl, Phases: phases, Started: time.Now().UTC(),
		SettleWithin: *settleIn, Swing: *swing,
	}
	fmt.Printf("upstream: %d workers, lognormal service time median %v σ %.2f, queue %d: capacity %.0f req/s; client timeout %v\n",
		*workers, *median, *sigma, *queue, capacity, *timeout)
	for _, p := range prots {
		r, err := runOne(p, phases)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name(), err)
		}
		rep.Runs = append(rep.Runs, r)
	}
	rep.evaluate()
	rep.print(os.Stdout)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(&rep, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	if *htmlOut != "" {
		f, err := os.Create(*htmlOut)
		if err != nil {
			return err
		}
		if err := rep.writeHTML(f); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Println("wrote", *htmlOut)
	}
	return nil
}

// plan turns the flags into phases.
func plan(capacity float64) ([]phase, error) {
	var ps []phase
	for _, s := range strings.Split(*steps, ",") {
		var load float64
		if _, err := fmt.Sscan(strings.TrimSpace(s), &load); err != nil || load <= 0 {
			return nil, fmt.Errorf("-steps: %q is not a positive load", s)
		}
		ps = append(ps, phase{Name: fmt.Sprintf("%g×", load), Load: load, Duration: *step})
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("-steps: no steps")
	}
	if *slow > 0 {
		last := ps[len(ps)-1]
		ps = append(ps, phase{Name: last.Name + " slow", Load: last.Load, Duration: *slow, Slow: true})
	}
	for i := range ps {
		total := ps[i].Load * capacity
		ps[i].Critical = total / 2
		if *criticalMax > 0 {
			ps[i].Critical = min(ps[i].Critical, *criticalMax*capacity)
		}
		ps[i].Shed = total - ps[i].Critical
	}
	return ps, nil
}

// runOne runs the phases through one protection in front of an upstream of its own.
func runOne(p protection, phases []phase) (runResult, error) {
	up := newUpstream(*workers, *queue, *median, *sigma)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return runResult{}, err
	}
	upSrv := &http.Server{Handler: up, ReadHeaderTimeout: 10 * time.Second}
	go upSrv.Serve(ln)
	defer upSrv.Close()
	url, err := p.start(up, "http://"+ln.Addr().String())
	if err != nil {
		return runResult{}, err
	}
	defer p.stop()

	fmt.Printf("%s: running %d phases\n", p.name(), len(phases))
	g := newGenerator(url, *timeout, *maxOut, *maxReq)
	start := time.Now()
	var samples []sampleAt
	var mu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(*sample)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				gg := p.gauge()
				mu.Lock()
				samples = append(samples, sampleAt{T: now.Sub(start).Seconds(), Limit: gg.Limit, Inflight: gg.Inflight,
					Queued: gg.Queued, Busy: int(up.busy.Load()), Waiting: int(up.waiting.Load())})
				mu.Unlock()
			}
		}
	}()
	g.run(start, phases, func(i int) {
		up.slow.Store(phases[i].Slow)
		fmt.Printf("%s: %5.1fs phase %s\n", p.name(), time.Since(start).Seconds(), phases[i].Name)
	})
	close(stop)
	<-sampled
	r := runResult{Protection: p.name(), Samples: samples, records: g.records, Seconds: time.Since(start).Seconds()}
	r.summarise(phases, up.capacity())
	return r, nil
}
