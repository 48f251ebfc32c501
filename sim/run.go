package sim

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

// StoreFunc opens the limiter one run decides with. now is the run's virtual clock: the
// limiter must take the time of every decision from it. The limiter starts empty for the
// keys the run uses; close is called when the run ends.
type StoreFunc func(now func() time.Time) (lim sluice.Limiter, close func() error, err error)

// MemoryStore opens a fresh in-process store (package memory) on the virtual clock, with
// background sweeping off so that nothing but the run touches it.
func MemoryStore(now func() time.Time) (sluice.Limiter, func() error, error) {
	s := memory.New(memory.WithClock(now), memory.WithSweepInterval(0), memory.WithShards(16))
	return s, s.Close, nil
}

// Config says what Run simulates.
type Config struct {
	// Patterns to run; nil means Patterns(1).
	Patterns []Pattern
	// Algorithms to run each pattern under; nil means all six.
	Algorithms []sluice.Algorithm
	// Seed makes the runs reproducible: the same seed gives the same results.
	Seed uint64
	// Store opens each run's limiter; nil means MemoryStore. StoreName names it in outputs.
	Store     StoreFunc
	StoreName string
	// Parallel is how many runs proceed at once; 0 means GOMAXPROCS. Results do not
	// depend on it.
	Parallel int
	// Progress, if set, is called from time to time with the requests decided so far and
	// the (estimated) total. It must be safe for concurrent use.
	Progress func(done, total int64)
}

// Report is the outcome of Run: one Result per (pattern, algorithm), in pattern order and
// then algorithm order.
type Report struct {
	Seed     uint64
	Store    string
	Patterns []Pattern
	Results  []Result
	// Estimates has one Estimate per pattern, in pattern order.
	Estimates []Estimate
	// Populations has one PopulationAccuracy per pattern with a Population, in pattern
	// order.
	Populations []PopulationAccuracy
}

// Result is what one pattern did under one algorithm.
//
// Every request is judged against the exact sliding window over the same run's admitted
// history: the exact verdict for a request at t is "allow" when the units admitted in
// (t-Period, t] plus its cost are at most Rate, which is what SlidingLog decides. A false
// allow is a request the algorithm admitted that the exact window would have denied, a
// false deny the reverse; both rates are per request (of all requests), the way Cloudflare
// reports its figure.
type Result struct {
	Pattern   string           `json:"pattern"`
	Algorithm sluice.Algorithm `json:"algorithm"`
	Limit     string           `json:"limit"`
	Keys      int              `json:"keys"`
	Requests  int64            `json:"requests"`
	Admitted  int64            `json:"admitted"`
	Denied    int64            `json:"denied"`
	// MaxWindowRatio is the largest number of units admitted for one key in any rolling
	// window (t-Period, t], divided by Rate. 1 is exact; the fixed window reaches 2.
	MaxWindowRatio float64 `json:"max_window_ratio"`
	FalseAllows    int64   `json:"false_allows"`
	FalseDenies    int64   `json:"false_denies"`
	FalseAllowRate float64 `json:"false_allow_rate"`
	FalseDenyRate  float64 `json:"false_deny_rate"`
	// RateError, for the window counters (fixed_window, sliding_window), is the mean over
	// requests of |estimate - real| / real, where estimate is the algorithm's count of the
	// window (for sliding_window ⌊prev·(Period-e-1)/Period⌋ + cur) and real the exact
	// count of (t-Period, t], over the requests where real > 0. Absent for the others.
	RateError *float64 `json:"rate_error,omitempty"`
	// RetryAfterChecks is the number of denials whose Retry-After was tested: with nothing
	// admitted on the key meanwhile, a look at now+RetryAfter must allow (else the
	// Retry-After was a lie, counted in RetryAfterLate) and a look 1µs earlier must deny
	// (else it overstated the wait, counted in RetryAfterEarly). Denials sharing a key and
	// a retry instant are tested once.
	RetryAfterChecks int64 `json:"retry_after_checks"`
	RetryAfterLate   int64 `json:"retry_after_late"`
	RetryAfterEarly  int64 `json:"retry_after_early"`
	// RetryAfterHonest: every tested Retry-After let the request through exactly then.
	RetryAfterHonest bool `json:"retry_after_honest"`
	// StateBytesPerKey is the algorithm's own state per key in bytes: 8 per int64 field
	// (the bucket machine, for gcra, token_bucket and leaky_bucket alike, 8: its TAT; fixed
	// window 16; sliding window 24), and for
	// sliding_log 8 per timestamp at each key's peak, averaged over the keys that had
	// traffic. Key bytes and table overhead are excluded (package memory documents them).
	StateBytesPerKey float64 `json:"state_bytes_per_key"`

	// Timeline is the charted key's history (not in JSON or CSV).
	Timeline Timeline `json:"-"`

	digest uint64 // of every (time, key, decision), to compare algorithms decision by decision
}

// Timeline is one key's history in equal bins of virtual time.
type Timeline struct {
	Key      string
	BinWidth time.Duration
	Admitted []int64
	Denied   []int64
	// Window is the largest rolling-window count (units admitted in (t-Period, t]) in
	// each bin: after each of the key's decisions in it, and at its last microsecond.
	Window []int64
	Rate   int64
}

// timelineBins is the number of bins in every timeline.
const timelineBins = 120

// Run simulates every configured pattern under every configured algorithm.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Patterns == nil {
		cfg.Patterns = Patterns(1)
	}
	if cfg.Algorithms == nil {
		cfg.Algorithms = store.Algorithms()
	}
	if cfg.Store == nil {
		cfg.Store, cfg.StoreName = MemoryStore, "memory"
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = runtime.GOMAXPROCS(0)
	}
	for _, p := range cfg.Patterns {
		if err := p.check(); err != nil {
			return nil, err
		}
		if p.Population != nil {
			if err := p.Population.check(); err != nil {
				return nil, fmt.Errorf("sim: pattern %s: %w", p.Name, err)
			}
		}
	}

	// Arrivals are generated once per pattern and shared, read-only, by its runs.
	arrivals := make([][]Arrival, len(cfg.Patterns))
	var total int64
	for i, p := range cfg.Patterns {
		arrivals[i] = p.Arrivals(patternRand(cfg.Seed, p.Name))
		if !slices.IsSortedFunc(arrivals[i], func(a, b Arrival) int { return cmp.Compare(a.At, b.At) }) {
			slices.SortStableFunc(arrivals[i], func(a, b Arrival) int { return cmp.Compare(a.At, b.At) })
		}
		for _, a := range arrivals[i] {
			if a.Key < 0 || int(a.Key) >= p.Keys || a.At < 0 {
				return nil, fmt.Errorf("sim: pattern %s: arrival %+v outside %d keys or before the start", p.Name, a, p.Keys)
			}
		}
		total += int64(len(arrivals[i])) * int64(len(cfg.Algorithms))
		if p.Population != nil {
			total += p.Population.expectedRequests()
		}
	}

	var done atomic.Int64
	progress := func(n int64) {
		if cfg.Progress != nil {
			cfg.Progress(done.Add(n), total)
		}
	}

	type job struct{ p, a int }
	jobs := make(chan job)
	results := make([]Result, len(cfg.Patterns)*len(cfg.Algorithms))
	errs := make([]error, len(results))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range min(cfg.Parallel, len(results)) {
		wg.Go(func() {
			for j := range jobs {
				i := j.p*len(cfg.Algorithms) + j.a
				results[i], errs[i] = runOne(ctx, cfg.Store, cfg.Patterns[j.p], cfg.Algorithms[j.a], arrivals[j.p], progress)
				if errs[i] != nil {
					cancel()
				}
			}
		})
	}
feed:
	for p := range cfg.Patterns {
		for a := range cfg.Algorithms {
			select {
			case jobs <- job{p, a}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	report := &Report{Seed: cfg.Seed, Store: cfg.StoreName, Patterns: cfg.Patterns, Results: results}
	for i, p := range cfg.Patterns {
		report.Estimates = append(report.Estimates, estimate(p, arrivals[i]))
		if p.Population != nil {
			a, err := p.Population.measure(ctx, p.Name, cfg.Seed, cfg.Parallel, progress)
			if err != nil {
				return nil, err
			}
			report.Populations = append(report.Populations, a)
		}
	}
	return report, nil
}

func (p Pattern) check() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("sim: pattern without a name")
	case p.Arrivals == nil:
		return fmt.Errorf("sim: pattern %s: no Arrivals", p.Name)
	case p.Keys < 1 || p.Focus < 0 || p.Focus >= p.Keys:
		return fmt.Errorf("sim: pattern %s: %d keys, focus %d", p.Name, p.Keys, p.Focus)
	case p.Duration <= 0:
		return fmt.Errorf("sim: pattern %s: duration %v", p.Name, p.Duration)
	}
	return p.Limit.Validate()
}

// patternRand is the generator for a pattern's arrivals: a function of the seed and the
// pattern's name only, so adding patterns or algorithms changes no other pattern's traffic.
func patternRand(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	io.WriteString(h, name)
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// virtualClock is a run's clock; only the run's goroutine moves it.
type virtualClock struct{ us atomic.Int64 }

func (c *virtualClock) now() time.Time { return time.UnixMicro(c.us.Load()).UTC() }

// keyState is what a run tracks per key to judge its decisions.
type keyState struct {
	win    []int64 // admitted timestamps (µs), oldest first from head; one per unit
	head   int
	peak   int   // most timestamps held in (t-Period, t]
	admits int64 // units admitted so far; a probe is valid only if unchanged
	// The window-counter estimate of (t-Period, t] from the admitted history.
	wStart, cur, prev int64
	seen              bool
}

// inWindow drops timestamps at or before t-P and returns the count left.
func (k *keyState) inWindow(t, P int64) int64 {
	for k.head < len(k.win) && k.win[k.head] <= t-P {
		k.head++
	}
	if k.head > 1024 && k.head > len(k.win)/2 {
		k.win = append(k.win[:0], k.win[k.head:]...)
		k.head = 0
	}
	return int64(len(k.win) - k.head)
}

// countAfter is the number of held timestamps later than t (binary search).
func (k *keyState) countAfter(t int64) int64 {
	lo, hi := k.head, len(k.win)
	for lo < hi {
		m := (lo + hi) / 2
		if k.win[m] <= t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return int64(len(k.win) - lo)
}

// estimate is the window counter's estimate at t, from admitted counts per fixed window.
func (k *keyState) estimate(t, P int64, sliding bool) int64 {
	switch w := t - t%P; {
	case w == k.wStart+P:
		k.wStart, k.prev, k.cur = w, k.cur, 0
	case w > k.wStart+P:
		k.wStart, k.prev, k.cur = w, 0, 0
	}
	if !sliding {
		return k.cur
	}
	e := t - k.wStart
	return algo.MulDiv(k.prev, P-e-1, P) + k.cur
}

type probe struct {
	at     int64
	key    int32
	allow  bool  // what the look must decide
	admits int64 // the key's admits at the denial
}

type probeHeap []probe

func (h probeHeap) Len() int { return len(h) }
func (h probeHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	if h[i].key != h[j].key {
		return h[i].key < h[j].key
	}
	return !h[i].allow && h[j].allow
}
func (h probeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *probeHeap) Push(x any)   { *h = append(*h, x.(probe)) }
func (h *probeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// runOne runs pattern p under algorithm a on a fresh limiter.
func runOne(ctx context.Context, store StoreFunc, p Pattern, a sluice.Algorithm, arrivals []Arrival, progress func(int64)) (Result, error) {
	limit := p.Limit.With(a)
	if err := limit.Validate(); err != nil {
		return Result{}, fmt.Errorf("sim: pattern %s under %v: %w", p.Name, a, err)
	}
	clock := &virtualClock{}
	start := Epoch.UnixMicro()
	clock.us.Store(start)
	lim, closeStore, err := store(clock.now)
	if err != nil {
		return Result{}, fmt.Errorf("sim: opening the store: %w", err)
	}
	defer closeStore()

	P := limit.Period.Microseconds()
	keyNames := make([]string, p.Keys)
	for i := range keyNames {
		keyNames[i] = fmt.Sprintf("sim:%s:%d", p.Name, i)
	}
	keys := make([]keyState, p.Keys)
	var src source = &openLoop{a: arrivals}
	if p.HonourRetryAfter {
		src = newRetryClients(arrivals, p.Keys, p.Duration.Microseconds())
	}

	res := Result{Pattern: p.Name, Algorithm: a, Limit: limit.String(), Keys: p.Keys, digest: 14695981039346656037}
	binW := (p.Duration.Microseconds() + timelineBins - 1) / timelineBins
	tl := Timeline{
		Key: keyNames[p.Focus], BinWidth: time.Duration(binW) * time.Microsecond, Rate: limit.Rate,
		Admitted: make([]int64, timelineBins), Denied: make([]int64, timelineBins), Window: make([]int64, timelineBins),
	}
	// sampled is the number of leading bins whose Window includes the count at the bin's
	// last microsecond. A bin is sampled once the charted key's next decision falls in a
	// later bin (or the run ends), when its admitted history up to that instant is final.
	sampled := 0
	sampleTo := func(bin int) {
		f := &keys[p.Focus]
		for ; sampled < bin && sampled < timelineBins; sampled++ {
			last := start + int64(sampled+1)*binW - 1 // the bin's last microsecond
			tl.Window[sampled] = max(tl.Window[sampled], f.countAfter(last-P))
		}
	}
	windowCounter := a == sluice.FixedWindow || a == sluice.SlidingWindow
	var rateErrSum float64
	var rateErrN int64
	var maxWindow int64

	var probes probeHeap
	probing := map[[2]int64]bool{}
	runProbes := func(until int64) error {
		for probes.Len() > 0 && probes[0].at <= until {
			pr := heap.Pop(&probes).(probe)
			if pr.allow {
				delete(probing, [2]int64{int64(pr.key), pr.at})
			}
			if keys[pr.key].admits != pr.admits {
				continue // something was admitted since: the Retry-After no longer applies
			}
			clock.us.Store(pr.at)
			d, err := sluice.AllowN(ctx, lim, keyNames[pr.key], limit, 0)
			if err != nil {
				return fmt.Errorf("sim: %s under %v: %w", p.Name, a, err)
			}
			switch {
			case pr.allow && !d.Allowed:
				res.RetryAfterLate++
			case !pr.allow && d.Allowed:
				res.RetryAfterEarly++
			}
			if pr.allow {
				res.RetryAfterChecks++
			}
		}
		return nil
	}

	var batch int64
	for {
		arr, ok := src.next()
		if !ok {
			break
		}
		if batch++; batch == 1024 {
			progress(batch)
			batch = 0
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
		}
		t := start + arr.At
		if err := runProbes(t); err != nil {
			return Result{}, err
		}
		k := &keys[arr.Key]
		k.seen = true
		real := k.inWindow(t, P)
		var est int64
		if windowCounter {
			est = k.estimate(t, P, a == sluice.SlidingWindow)
		}
		bin := int((t - start) / binW)
		if arr.Key == int32(p.Focus) {
			sampleTo(bin)
		}

		clock.us.Store(t)
		d, err := sluice.AllowN(ctx, lim, keyNames[arr.Key], limit, 1)
		if err != nil {
			return Result{}, fmt.Errorf("sim: %s under %v: %w", p.Name, a, err)
		}
		res.Requests++
		exact := real+1 <= limit.Rate
		if windowCounter && real > 0 {
			diff := est - real
			if diff < 0 {
				diff = -diff
			}
			rateErrSum += float64(diff) / float64(real)
			rateErrN++
		}
		after := real
		if d.Allowed {
			res.Admitted++
			if !exact {
				res.FalseAllows++
			}
			k.win = append(k.win, t)
			k.admits++
			after++
			k.peak = max(k.peak, int(after))
			maxWindow = max(maxWindow, after)
			if windowCounter {
				k.cur++
			}
		} else {
			res.Denied++
			if exact {
				res.FalseDenies++
			}
			ra := d.RetryAfter.Microseconds()
			at := t + ra
			if id := [2]int64{int64(arr.Key), at}; !probing[id] && ra > 0 {
				probing[id] = true
				heap.Push(&probes, probe{at: at - 1, key: arr.Key, allow: false, admits: k.admits})
				heap.Push(&probes, probe{at: at, key: arr.Key, allow: true, admits: k.admits})
			}
			if ra <= 0 {
				res.RetryAfterLate++ // a denial must name a positive wait
				res.RetryAfterChecks++
			}
		}
		if arr.Key == int32(p.Focus) && bin < timelineBins {
			if d.Allowed {
				tl.Admitted[bin]++
			} else {
				tl.Denied[bin]++
			}
			tl.Window[bin] = max(tl.Window[bin], after)
		}
		res.digest = mix(mix(mix(res.digest, uint64(t)), uint64(arr.Key)), boolBit(d.Allowed))
		src.result(arr, d.Allowed, d.RetryAfter.Microseconds())
	}
	progress(batch)
	if err := runProbes(1<<62 - 1); err != nil {
		return Result{}, err
	}
	sampleTo(timelineBins)

	res.Timeline = tl
	res.RetryAfterHonest = res.RetryAfterLate == 0
	if res.Requests > 0 {
		res.FalseAllowRate = float64(res.FalseAllows) / float64(res.Requests)
		res.FalseDenyRate = float64(res.FalseDenies) / float64(res.Requests)
	}
	res.MaxWindowRatio = float64(maxWindow) / float64(limit.Rate)
	if windowCounter {
		e := 0.0
		if rateErrN > 0 {
			e = rateErrSum / float64(rateErrN)
		}
		res.RateError = &e
	}
	res.StateBytesPerKey = stateBytes(a, keys)
	return res, nil
}

// stateBytes is Result.StateBytesPerKey.
func stateBytes(a sluice.Algorithm, keys []keyState) float64 {
	switch a {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket: // one machine, algo.GCRA
		return 8
	case sluice.FixedWindow:
		return 16
	case sluice.SlidingWindow:
		return 24
	}
	var sum, n int64
	for _, k := range keys {
		if k.seen {
			sum += int64(k.peak)
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return 8 * float64(sum) / float64(n)
}

func mix(h, v uint64) uint64 { return (h ^ v) * 1099511628211 }

func boolBit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
