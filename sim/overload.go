package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/overload"
)

// OverloadConfig is the overload scenario of [RunOverload], bench/cmd/overload on the
// virtual clock: an upstream of fixed capacity, an open-loop load stepped through
// multiples of that capacity, half of it critical and half sheddable, the upstream
// slowing to half its speed while the last step's load goes on, and the protections
// that stand between the two. Start from [DefaultOverload], the benchmark's defaults: a
// zero field is no default, unless its comment says what 0 means.
type OverloadConfig struct {
	// Workers is how many requests the upstream serves at once; each takes a service
	// time drawn from a lognormal distribution of Median and Sigma (of its logarithm), so
	// the capacity is Workers ÷ (Median·exp(Sigma²/2)) requests a second.
	Workers int
	Median  time.Duration
	Sigma   float64
	// Queue is how many more requests may wait for a worker (0: none); one beyond it is
	// answered 503 by the upstream at once. The upstream serves every request it queued
	// to the end, even when its client has given up.
	Queue int
	// Steps are the offered loads, multiples of the capacity, each offered for Step.
	Steps []float64
	Step  time.Duration
	// Slow is how long the last step's load goes on after the upstream halves its speed
	// (a service time that starts then takes twice as long); 0: it never does.
	Slow time.Duration
	// CriticalMax caps the critical arrivals at this multiple of the capacity, the rest
	// of each step sheddable; 0: half of every step is critical.
	CriticalMax float64
	// Timeout is how long each client waits for its answer; it does not retry.
	Timeout time.Duration
	// Protections are run one after the other on the same arrivals, each in front of an
	// upstream of its own: "none" (every request reaches the upstream), "fixed" (at most
	// Fixed requests in flight, the rest shed at once), "sluice" (an overload.Limiter of
	// Limiter, with the virtual clock as its Clock).
	Protections []string
	Fixed       int
	Limiter     overload.Config
	// Sample is how often the limit and the requests in flight are sampled.
	Sample time.Duration
	// SettleWithin and Swing are the target the limit is judged by after the upstream
	// halves its speed: within SettleWithin it comes within ±Swing (a fraction) of where
	// it ends, and stays there (see [OverloadSettle]).
	SettleWithin time.Duration
	Swing        float64
	// Seed seeds the arrivals, their classes and service times: the same seed gives the
	// same report.
	Seed uint64
}

// DefaultOverload returns bench/cmd/overload's defaults: 16 workers, a 100 ms median
// service time with σ 0.5 (about 141 requests a second), a queue of 1024, steps of
// 0.5×, 1×, 2× and 4× of 6 s each, then 16 s of 4× at half speed, a 2 s client timeout,
// none, fixed (16) and sluice (overload's defaults) compared, sampled every 100 ms, and
// the limit judged on settling within 10 s to a swing of ±20%.
func DefaultOverload() OverloadConfig {
	return OverloadConfig{
		Workers: 16, Median: 100 * time.Millisecond, Sigma: 0.5, Queue: 1024,
		Steps: []float64{0.5, 1, 2, 4}, Step: 6 * time.Second, Slow: 16 * time.Second,
		Timeout: 2 * time.Second, Protections: slices.Clone(OverloadProtections), Fixed: 16,
		Sample: 100 * time.Millisecond, SettleWithin: 10 * time.Second, Swing: 0.2, Seed: 1,
	}
}

// OverloadProtections are the protections an overload run compares.
var OverloadProtections = []string{"none", "fixed", "sluice"}

// Capacity is the upstream's throughput at full speed, in requests a second.
func (c OverloadConfig) Capacity() float64 {
	return float64(c.Workers) / (c.Median.Seconds() * math.Exp(c.Sigma*c.Sigma/2))
}

func (c OverloadConfig) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, a...)...)
	}
	switch {
	case c.Workers < 1 || c.Workers > 1_000_000:
		return bad("workers must be in [1, 1000000], got %d", c.Workers)
	case c.Median <= 0:
		return bad("median must be positive, got %v", c.Median)
	case !(c.Sigma >= 0) || c.Sigma > 3:
		return bad("sigma must be in [0, 3], got %v", c.Sigma)
	case c.Queue < 0:
		return bad("queue must not be negative, got %d", c.Queue)
	case len(c.Steps) == 0:
		return bad("steps: none given")
	case c.Step <= 0 || c.Slow < 0:
		return bad("step must be positive and slow not negative, got %v and %v", c.Step, c.Slow)
	case !(c.CriticalMax >= 0):
		return bad("critical-max must not be negative, got %v", c.CriticalMax)
	case c.Timeout <= 0:
		return bad("timeout must be positive, got %v", c.Timeout)
	case c.Fixed < 1:
		return bad("fixed must be at least 1, got %d", c.Fixed)
	case c.Sample <= 0:
		return bad("sample must be positive, got %v", c.Sample)
	case c.SettleWithin <= 0 || !(c.Swing > 0):
		return bad("settle and swing must be positive, got %v and %v", c.SettleWithin, c.Swing)
	case len(c.Protections) == 0:
		return bad("protections: none given")
	}
	for _, s := range c.Steps {
		if !(s > 0) || s > 1000 {
			return bad("steps: %v is not a load in (0, 1000]", s)
		}
	}
	for _, p := range c.Protections {
		if !slices.Contains(OverloadProtections, p) {
			return bad("protections: unknown protection %q: a run compares none, fixed and sluice", p)
		}
	}
	if err := c.Limiter.Validate(); err != nil {
		return bad("%v", err)
	}
	var total time.Duration
	for range c.Steps {
		total += c.Step
	}
	if total+c.Slow > 24*time.Hour || c.Capacity()*(total+c.Slow).Seconds()*slices.Max(c.Steps) > 50_000_000 {
		return bad("the run would offer more than 50 million requests")
	}
	return nil
}

// OverloadPhase is one stretch of a run at one offered load.
type OverloadPhase struct {
	Name      string        `json:"name"`
	Load      float64       `json:"load"`      // offered load, a multiple of the full-speed capacity
	Critical  float64       `json:"critical"`  // critical arrivals a second
	Sheddable float64       `json:"sheddable"` // sheddable arrivals a second
	Duration  time.Duration `json:"duration_ns"`
	Slow      bool          `json:"slow"` // the upstream serves at half speed
}

// OverloadReport is the outcome of RunOverload: the scenario, and one run per protection
// in the order of OverloadConfig.Protections.
type OverloadReport struct {
	Seed     uint64        `json:"seed"`
	Capacity float64       `json:"capacity"` // requests a second at full speed
	Workers  int           `json:"workers"`
	Median   time.Duration `json:"median_ns"`
	Sigma    float64       `json:"sigma"`
	Queue    int           `json:"queue"`
	Timeout  time.Duration `json:"timeout_ns"`
	Fixed    int           `json:"fixed_limit"`
	// Sluice names the overload.Config settings of the sluice protection that are not
	// the package's defaults, as Go would write them ("Tolerance:20"); "" for none.
	Sluice       string          `json:"sluice_settings"`
	Phases       []OverloadPhase `json:"phases"`
	SettleWithin time.Duration   `json:"settle_within_ns"`
	Swing        float64         `json:"swing"`
	Runs         []OverloadRun   `json:"runs"`
	// Targets are issue 42's targets judged on each run, in the order of Runs.
	Targets []OverloadTarget `json:"targets"`
}

// OverloadRun is one protection's run.
type OverloadRun struct {
	Protection string           `json:"protection"`
	Phases     []PhaseResult    `json:"phases"` // in the order of the report's Phases
	Samples    []OverloadSample `json:"samples"`
	// Settle is how the limit behaved after the upstream halved its speed; nil without
	// a slow phase or a limit.
	Settle *OverloadSettle `json:"settle,omitempty"`
	// Seconds counts, a second of the run at a time, the successes answered in it.
	Seconds []SecondResult `json:"-"`
}

// PhaseResult is what one protection's run met in one phase: a request counts in the
// phase it was due in, a success in Goodput in the phase it was answered in.
type PhaseResult struct {
	Name      string      `json:"name"`
	Goodput   float64     `json:"goodput"`       // successes answered during the phase, a second
	Share     float64     `json:"goodput_share"` // Goodput over the capacity at the phase's speed
	Critical  ClassResult `json:"critical"`
	Sheddable ClassResult `json:"sheddable"`
	LimitMean float64     `json:"limit_mean"` // of the samples in the phase; 0 without a limit
	LimitMin  int         `json:"limit_min"`
	LimitMax  int         `json:"limit_max"`
	InFlight  float64     `json:"inflight_mean"`
}

// ClassResult is what the requests of one class met in one phase. A request ends one
// way: OK (answered 200 within its client's timeout), Shed (503 from the protection),
// Rejected (503 from the upstream's full queue) or TimedOut (no answer within the
// timeout). Latencies are of successes, in milliseconds from when the request was due.
type ClassResult struct {
	Offered  int     `json:"offered"`
	OK       int     `json:"ok"`
	Shed     int     `json:"shed"`
	Rejected int     `json:"upstream_rejected"`
	TimedOut int     `json:"timed_out"`
	Success  float64 `json:"success"` // OK over Offered
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
}

// OverloadSample is one sample of a protection: its limit (0: none), the requests it
// let through that have not been answered, and those it holds waiting for a permit.
type OverloadSample struct {
	At       time.Duration `json:"at_ns"`
	Limit    int           `json:"limit"`
	InFlight int           `json:"inflight"`
	Queued   int           `json:"queued"`
}

// SecondResult is one second of a run: the successes answered in it, by class.
type SecondResult struct {
	CriticalOK, SheddableOK int64
}

// Shed returns the requests the protection shed in the phase.
func (p PhaseResult) Shed() int { return p.Critical.Shed + p.Sheddable.Shed }

// RunOverload runs the overload scenario c under each of its protections, on a virtual
// clock driven by one event queue: nothing sleeps and no goroutine waits, so a run of
// minutes takes a fraction of a second, and the same c gives the same report. A
// configuration it cannot run is an error wrapping ErrUsage.
func RunOverload(ctx context.Context, c OverloadConfig) (*OverloadReport, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	phases := c.phases()
	arrivals := c.arrivals(phases)
	rep := &OverloadReport{
		Seed: c.Seed, Capacity: c.Capacity(), Workers: c.Workers, Median: c.Median, Sigma: c.Sigma,
		Queue: c.Queue, Timeout: c.Timeout, Fixed: c.Fixed, Sluice: settings(c.Limiter), Phases: phases,
		SettleWithin: c.SettleWithin, Swing: c.Swing,
	}
	for _, name := range c.Protections {
		s := newOverloadSim(c, phases, arrivals)
		if err := s.open(name); err != nil {
			return nil, err
		}
		if err := s.run(ctx); err != nil {
			return nil, err
		}
		rep.Runs = append(rep.Runs, s.result(name))
	}
	rep.evaluate()
	return rep, nil
}

// settings names c's fields that are set, but for its Clock, as Go would write them.
func settings(c overload.Config) string {
	c.Clock = nil
	var out []string
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		if f := v.Field(i); !f.IsZero() {
			out = append(out, fmt.Sprintf("%s:%v", v.Type().Field(i).Name, f.Interface()))
		}
	}
	return strings.Join(out, " ")
}

// phases turns the steps into phases, the last step's slow stretch a phase of its own.
func (c OverloadConfig) phases() []OverloadPhase {
	var ps []OverloadPhase
	for _, load := range c.Steps {
		ps = append(ps, OverloadPhase{Name: fmt.Sprintf("%g×", load), Load: load, Duration: c.Step})
	}
	if c.Slow > 0 {
		last := ps[len(ps)-1]
		ps = append(ps, OverloadPhase{Name: last.Name + " slow", Load: last.Load, Duration: c.Slow, Slow: true})
	}
	capacity := c.Capacity()
	for i := range ps {
		total := ps[i].Load * capacity
		ps[i].Critical = total / 2
		if c.CriticalMax > 0 {
			ps[i].Critical = min(ps[i].Critical, c.CriticalMax*capacity)
		}
		ps[i].Sheddable = total - ps[i].Critical
	}
	return ps
}

// ovArrival is one request of the load: when it is due (ns into the run), its class, and
// its service time at full speed.
type ovArrival struct {
	due      int64
	critical bool
	service  int64
}

// arrivals draws the open-loop Poisson load of the phases, as bench/cmd/overload sends
// it, from two generators seeded with the seed: one for the arrivals and their classes,
// one for the service times.
func (c OverloadConfig) arrivals(phases []OverloadPhase) []ovArrival {
	arr := rand.New(rand.NewPCG(c.Seed, nameHash("overload arrivals")))
	svc := rand.New(rand.NewPCG(c.Seed, nameHash("overload service")))
	var out []ovArrival
	next, end := 0.0, 0.0 // ns
	for _, p := range phases {
		end += float64(p.Duration)
		rate := p.Critical + p.Sheddable
		for {
			next += arr.ExpFloat64() / rate * 1e9
			if next >= end {
				break
			}
			critical := arr.Float64()*rate < p.Critical
			service := float64(c.Median) * math.Exp(c.Sigma*svc.NormFloat64())
			out = append(out, ovArrival{due: int64(next), critical: critical, service: max(int64(service), 1)})
		}
		next = end
	}
	return out
}

// A gate is a protection in the simulation: it decides each request, and hears when the
// upstream has answered one it let through.
type gate interface {
	// admit decides request i: s.forward(i) or s.shed(i), now or from a later event.
	admit(s *overloadSim, i int)
	// answered ends request i, which the gate let through.
	answered(i int)
	gauge() OverloadSample
}

// open puts the named protection in front of the upstream.
func (s *overloadSim) open(name string) error {
	switch name {
	case "none":
		s.g = &openGate{}
	case "fixed":
		s.g = &fixedGate{limit: s.cfg.Fixed}
	default:
		cfg := s.cfg.Limiter
		cfg.Clock = func() time.Time { return Epoch.Add(time.Duration(s.now)) }
		lim, err := overload.New(cfg)
		if err != nil {
			return err
		}
		s.g = &sluiceGate{lim: lim, permits: map[int]*overload.Permit{}}
	}
	return nil
}

// openGate lets every request through.
type openGate struct{ inflight int }

func (g *openGate) admit(s *overloadSim, i int) { g.inflight++; s.forward(i) }
func (g *openGate) answered(int)                { g.inflight-- }
func (g *openGate) gauge() OverloadSample       { return OverloadSample{InFlight: g.inflight} }

// fixedGate admits at most limit requests at once and sheds the rest at once, whatever
// their class.
type fixedGate struct{ limit, inflight int }

func (g *fixedGate) admit(s *overloadSim, i int) {
	if g.inflight >= g.limit {
		s.shed(i)
		return
	}
	g.inflight++
	s.forward(i)
}
func (g *fixedGate) answered(int) { g.inflight-- }
func (g *fixedGate) gauge() OverloadSample {
	return OverloadSample{Limit: g.limit, InFlight: g.inflight}
}

// sluiceGate is an overload.Limiter on the virtual clock, through Enqueue: its outcomes
// become events at the instant they are decided. A request still waiting when its
// client gives up is canceled, as the client's context would cancel Acquire.
type sluiceGate struct {
	lim     *overload.Limiter
	permits map[int]*overload.Permit // of the requests let through, until answered
}

func (g *sluiceGate) admit(s *overloadSim, i int) {
	c := overload.Sheddable
	if s.arrivals[i].critical {
		c = overload.Critical
	}
	decided := false
	cancel := g.lim.Enqueue(c, func(p *overload.Permit, err error) {
		// Under the limiter's lock: the outcome is acted on as an event of this instant.
		decided = true
		s.push(ovEvent{at: s.now, do: func() { g.decided(s, i, p, err) }})
	})
	if !decided {
		s.push(ovEvent{at: s.arrivals[i].due + int64(s.cfg.Timeout), do: func() { cancel(context.DeadlineExceeded) }})
	}
}

func (g *sluiceGate) decided(s *overloadSim, i int, p *overload.Permit, err error) {
	var shed *overload.Shed
	switch {
	case p != nil:
		g.permits[i] = p
		s.forward(i)
	case errors.As(err, &shed) && shed.Reason == overload.ReasonCanceled:
		s.end(i, ovTimedOut) // its client gave up while it waited
	default:
		s.shed(i)
	}
}

func (g *sluiceGate) answered(i int) {
	g.permits[i].Release()
	delete(g.permits, i)
}

func (g *sluiceGate) gauge() OverloadSample {
	st := g.lim.Stats()
	return OverloadSample{Limit: st.Limit, InFlight: st.InFlight, Queued: st.Queued}
}

// How a request ended, as its client saw it.
type ovOutcome uint8

const (
	ovPending  ovOutcome = iota
	ovOK                 // answered 200 within the timeout
	ovShed               // 503 from the protection
	ovRejected           // 503 from the upstream's full queue
	ovTimedOut           // no answer within the timeout
)

type ovEventKind uint8

const (
	evCall   ovEventKind = iota // call do
	evSample                    // sample the gate
	evDone                      // the upstream finishes serving req
)

type ovEvent struct {
	at   int64 // ns into the run
	seq  uint64
	kind ovEventKind
	req  int
	do   func()
}

// overloadSim is one protection's run: the gate, the upstream and the requests' fates.
type overloadSim struct {
	cfg      OverloadConfig
	phases   []OverloadPhase
	arrivals []ovArrival
	g        gate

	now    int64 // ns into the run: the virtual clock
	seq    uint64
	events queue[ovEvent]

	slowAt  int64 // ns; math.MaxInt64: never
	until   int64 // ns, the last phase's end
	busy    int   // workers serving
	waiting []int // requests queued for a worker, oldest first
	head    int

	outcome  []ovOutcome
	answered []int64 // ns, when each request ended for its client
	samples  []OverloadSample
}

func newOverloadSim(c OverloadConfig, phases []OverloadPhase, arrivals []ovArrival) *overloadSim {
	s := &overloadSim{
		cfg: c, phases: phases, arrivals: arrivals, slowAt: math.MaxInt64,
		outcome: make([]ovOutcome, len(arrivals)), answered: make([]int64, len(arrivals)),
	}
	s.events.less = func(a, b ovEvent) bool { return a.at < b.at || a.at == b.at && a.seq < b.seq }
	for _, p := range phases {
		if p.Slow && s.slowAt == math.MaxInt64 {
			s.slowAt = s.until
		}
		s.until += int64(p.Duration)
	}
	return s
}

func (s *overloadSim) push(e ovEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.events, e)
}

// run plays the arrivals and every event they cause, in time order, until every client
// has its answer or has given up.
func (s *overloadSim) run(ctx context.Context) error {
	s.push(ovEvent{at: 0, kind: evSample})
	next := 0
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		// Arrivals come before events of the same instant.
		if next < len(s.arrivals) && (s.events.Len() == 0 || s.arrivals[next].due <= s.events.s[0].at) {
			s.now = s.arrivals[next].due
			s.g.admit(s, next)
			next++
			continue
		}
		if s.events.Len() == 0 {
			break
		}
		e := heap.Pop(&s.events).(ovEvent)
		s.now = e.at
		switch e.kind {
		case evSample:
			smp := s.g.gauge()
			smp.At = time.Duration(s.now)
			s.samples = append(s.samples, smp)
			if t := s.now + int64(s.cfg.Sample); t < s.until {
				s.push(ovEvent{at: t, kind: evSample})
			}
		case evDone:
			s.busy--
			s.end(e.req, ovOK)
			s.g.answered(e.req)
			if s.head < len(s.waiting) {
				s.serve(s.waiting[s.head])
				s.head++
			}
		case evCall:
			e.do()
		}
	}
	return nil
}

// forward hands request i to the upstream: a worker, else its queue, else a 503.
func (s *overloadSim) forward(i int) {
	switch {
	case s.busy < s.cfg.Workers:
		s.serve(i)
	case len(s.waiting)-s.head < s.cfg.Queue:
		if s.head > 1024 && s.head > len(s.waiting)/2 {
			s.waiting = append(s.waiting[:0], s.waiting[s.head:]...)
			s.head = 0
		}
		s.waiting = append(s.waiting, i)
	default:
		s.end(i, ovRejected)
		s.g.answered(i)
	}
}

// serve starts serving request i on a free worker, at half speed from slowAt on.
func (s *overloadSim) serve(i int) {
	s.busy++
	d := s.arrivals[i].service
	if s.now >= s.slowAt {
		d *= 2
	}
	s.push(ovEvent{at: s.now + d, kind: evDone, req: i})
}

// shed answers request i 503 from the protection.
func (s *overloadSim) shed(i int) { s.end(i, ovShed) }

// end records how request i ended for its client now: an answer later than its timeout
// finds the client gone.
func (s *overloadSim) end(i int, o ovOutcome) {
	if s.now-s.arrivals[i].due > int64(s.cfg.Timeout) {
		o = ovTimedOut
	}
	s.outcome[i], s.answered[i] = o, s.now
}

// result summarises the run.
func (s *overloadSim) result(protection string) OverloadRun {
	r := OverloadRun{Protection: protection, Samples: s.samples}
	bounds := make([]int64, len(s.phases)+1) // ns
	for i, p := range s.phases {
		bounds[i+1] = bounds[i] + int64(p.Duration)
		r.Phases = append(r.Phases, PhaseResult{Name: p.Name})
	}
	// phaseOf is the phase an instant falls in; -1 after the last.
	phaseOf := func(t int64) int {
		i, found := slices.BinarySearch(bounds, t)
		if !found {
			i--
		}
		if i >= len(s.phases) {
			return -1
		}
		return i
	}
	r.Seconds = make([]SecondResult, (s.until+int64(time.Second)-1)/int64(time.Second))
	lat := make([][2][]float64, len(s.phases))
	completed := make([]int, len(s.phases))
	for i, a := range s.arrivals {
		ph := phaseOf(a.due)
		c, k := &r.Phases[ph].Sheddable, 1
		if a.critical {
			c, k = &r.Phases[ph].Critical, 0
		}
		c.Offered++
		switch s.outcome[i] {
		case ovOK:
			c.OK++
			lat[ph][k] = append(lat[ph][k], float64(s.answered[i]-a.due)/1e6)
			if j := phaseOf(s.answered[i]); j >= 0 {
				completed[j]++
				sec := &r.Seconds[s.answered[i]/int64(time.Second)]
				if a.critical {
					sec.CriticalOK++
				} else {
					sec.SheddableOK++
				}
			}
		case ovShed:
			c.Shed++
		case ovRejected:
			c.Rejected++
		default:
			c.TimedOut++
		}
	}
	capacity := s.cfg.Capacity()
	for i := range r.Phases {
		pr, p := &r.Phases[i], s.phases[i]
		pr.Goodput = float64(completed[i]) / p.Duration.Seconds()
		pr.Share = pr.Goodput / capacity
		if p.Slow {
			pr.Share *= 2
		}
		for k, c := range []*ClassResult{&pr.Critical, &pr.Sheddable} {
			if c.Offered > 0 {
				c.Success = float64(c.OK) / float64(c.Offered)
			}
			c.P50, c.P99 = quantile(lat[i][k], 0.50), quantile(lat[i][k], 0.99)
		}
		var n, sum, inflight int
		for _, smp := range s.samples {
			if phaseOf(int64(smp.At)) != i {
				continue
			}
			if n == 0 {
				pr.LimitMin, pr.LimitMax = smp.Limit, smp.Limit
			}
			n++
			sum += smp.Limit
			inflight += smp.InFlight
			pr.LimitMin, pr.LimitMax = min(pr.LimitMin, smp.Limit), max(pr.LimitMax, smp.Limit)
		}
		if n > 0 {
			pr.LimitMean, pr.InFlight = float64(sum)/float64(n), float64(inflight)/float64(n)
		}
		if p.Slow && i > 0 && !s.phases[i-1].Slow {
			r.Settle = settle(s.samples, bounds[i-1], bounds[i], bounds[i+1], s.cfg.SettleWithin, s.cfg.Sample, s.cfg.Swing)
		}
	}
	return r
}

// quantile is the q-quantile of v (nearest rank), 0 for none. It sorts v.
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}
