package sim

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math"
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

// StoreFunc opens the limiter one run decides with, empty for the run's keys and taking
// the time of every decision from now, the run's virtual clock. close ends the run.
type StoreFunc func(now func() time.Time) (lim sluice.Limiter, close func() error, err error)

// MemoryStore opens a fresh in-process store (package memory) on the virtual clock, with
// background sweeping off.
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
	// Progress, if set, is called now and then with the requests decided so far and the
	// estimated total, concurrently.
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
// false deny the reverse; both rates are per request, as Cloudflare reports its figure.
type Result struct {
	Pattern   string           `json:"pattern"`
	Algorithm sluice.Algorithm `json:"algorithm"`
	Limit     string           `json:"limit"`
	Keys      int              `json:"keys"`
	Requests  int64            `json:"requests"`
	Admitted  int64            `json:"admitted"`
	Denied    int64            `json:"denied"`
	// MaxWindowRatio is the most units admitted for one key in any rolling window
	// (t-Period, t], divided by Rate. 1 is exact; the fixed window reaches 2.
	MaxWindowRatio float64 `json:"max_window_ratio"`
	FalseAllows    int64   `json:"false_allows"`
	FalseDenies    int64   `json:"false_denies"`
	FalseAllowRate float64 `json:"false_allow_rate"`
	FalseDenyRate  float64 `json:"false_deny_rate"`
	// RateError, for fixed_window and sliding_window only, is the mean over requests with
	// real > 0 of |estimate - real| / real: the algorithm's count of the window against the
	// exact count of (t-Period, t].
	RateError *float64 `json:"rate_error,omitempty"`
	// RetryAfterChecks is the number of denials whose Retry-After was tested: with nothing
	// admitted on the key meanwhile, a look at now+RetryAfter must allow (else it counts in
	// RetryAfterLate) and a look 1µs earlier must deny (else in RetryAfterEarly). Denials
	// sharing a key and a retry instant are tested once.
	RetryAfterChecks int64 `json:"retry_after_checks"`
	RetryAfterLate   int64 `json:"retry_after_late"`
	RetryAfterEarly  int64 `json:"retry_after_early"`
	// RetryAfterHonest: every tested Retry-After let the request through exactly then.
	RetryAfterHonest bool `json:"retry_after_honest"`
	// StateBytesPerKey is the algorithm's own state per key, 8 bytes per int64: 8 for the
	// bucket algorithms (a TAT), 16 for fixed_window, 24 for sliding_window, and for
	// sliding_log 8 per timestamp at each key's peak, averaged over the keys with traffic.
	// Key bytes and table overhead are excluded.
	StateBytesPerKey float64 `json:"state_bytes_per_key"`

	// Timeline is the charted key's history (not in JSON or CSV).
	Timeline Timeline `json:"-"`

	digest uint64 // of every (time, key, admitted so far), to compare runs decision by decision
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
	// Arrivals are generated once per pattern and shared, read-only, by its runs.
	arrivals := make([][]Arrival, len(cfg.Patterns))
	var total int64
	for i, p := range cfg.Patterns {
		if err := p.check(); err != nil {
			return nil, err
		}
		arrivals[i] = p.Arrivals(patternRand(cfg.Seed, p.Name))
		slices.SortStableFunc(arrivals[i], func(a, b Arrival) int { return cmp.Compare(a.At, b.At) })
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

	algs := len(cfg.Algorithms)
	results := make([]Result, len(cfg.Patterns)*algs)
	err := forEach(ctx, len(results), cfg.Parallel, func(ctx context.Context, i int) (err error) {
		p := i / algs
		results[i], err = runOne(ctx, cfg.Store, cfg.Patterns[p], cfg.Algorithms[i%algs], arrivals[p], progress)
		return err
	})
	if err != nil {
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

// forEach calls f for every i in [0, n), on up to workers goroutines. After an error it
// starts no more calls and cancels the context of those under way. It returns the error
// of the least i that failed, else ctx's.
func forEach(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if errs[i] = f(ctx, i); errs[i] != nil {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	return cmp.Or(append(errs, ctx.Err())...)
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
	if err := p.Limit.Validate(); err != nil || p.Population == nil {
		return err
	}
	if err := p.Population.check(); err != nil {
		return fmt.Errorf("sim: pattern %s: %w", p.Name, err)
	}
	return nil
}

// patternRand is the generator for a pattern's arrivals: a function of the seed and the
// pattern's name only, so adding patterns or algorithms changes no other pattern's traffic.
func patternRand(seed uint64, name string) *rand.Rand {
	return rand.New(rand.NewPCG(seed, nameHash(name)))
}

func nameHash(s string) uint64 {
	h := fnv.New64a()
	io.WriteString(h, s)
	return h.Sum64()
}

// keyState is what a run tracks per key to judge its decisions.
type keyState struct {
	win    []int64 // admitted timestamps (µs), oldest first from head; one per unit
	head   int
	peak   int        // most timestamps held in (t-Period, t]
	admits int64      // units admitted so far; a probe is valid only if unchanged
	wc     algo.State // a window counter's state (see windowCounter)
	seen   bool
}

// windowCounter returns the parameters of algorithm a (FixedWindow or SlidingWindow)
// over Period P, with a Rate it never reaches: deciding with them only counts, and
// Rate - Remaining is the algorithm's estimate of the units in (now-P, now].
func windowCounter(a sluice.Algorithm, P int64) algo.Params {
	return algo.Params{Algo: a, Rate: 1 << 62, Period: P}
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

// countAfter is the number of held timestamps later than t.
func (k *keyState) countAfter(t int64) int64 {
	i, _ := slices.BinarySearch(k.win[k.head:], t+1)
	return int64(len(k.win) - k.head - i)
}

// queue is a container/heap of T, least first.
type queue[T any] struct {
	s    []T
	less func(a, b T) bool
}

func (q *queue[T]) Len() int           { return len(q.s) }
func (q *queue[T]) Less(i, j int) bool { return q.less(q.s[i], q.s[j]) }
func (q *queue[T]) Swap(i, j int)      { q.s[i], q.s[j] = q.s[j], q.s[i] }
func (q *queue[T]) Push(x any)         { q.s = append(q.s, x.(T)) }
func (q *queue[T]) Pop() any {
	x := q.s[len(q.s)-1]
	q.s = q.s[:len(q.s)-1]
	return x
}

// probe is a look at a denied key's Retry-After instant (allow) or 1µs before it.
type probe struct {
	at     int64
	key    int32
	allow  bool  // what the look must decide
	admits int64 // the key's admits at the denial
}

// runOne runs pattern p under algorithm a on a fresh limiter.
func runOne(ctx context.Context, open StoreFunc, p Pattern, a sluice.Algorithm, arrivals []Arrival, progress func(int64)) (Result, error) {
	limit := p.Limit.With(a)
	if err := limit.Validate(); err != nil {
		return Result{}, fmt.Errorf("sim: pattern %s under %v: %w", p.Name, a, err)
	}
	start := Epoch.UnixMicro()
	var clock atomic.Int64 // the virtual clock, µs; only this goroutine moves it
	clock.Store(start)
	lim, closeStore, err := open(func() time.Time { return time.UnixMicro(clock.Load()).UTC() })
	if err != nil {
		return Result{}, fmt.Errorf("sim: opening the store: %w", err)
	}
	defer closeStore()

	P := limit.Period.Microseconds()
	keyNames := make([]string, p.Keys)
	for i := range keyNames {
		keyNames[i] = fmt.Sprintf("sim:%s:%d", p.Name, i)
	}
	decide := func(t int64, key int32, n int64) (sluice.Decision, error) {
		clock.Store(t)
		d, err := sluice.AllowN(ctx, lim, keyNames[key], limit, n)
		if err != nil {
			return d, fmt.Errorf("sim: %s under %v: %w", p.Name, a, err)
		}
		return d, nil
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
		for ; sampled < bin && sampled < timelineBins; sampled++ {
			last := start + int64(sampled+1)*binW - 1 // the bin's last microsecond
			tl.Window[sampled] = max(tl.Window[sampled], keys[p.Focus].countAfter(last-P))
		}
	}
	counting := a == sluice.FixedWindow || a == sluice.SlidingWindow
	wp := windowCounter(a, P)
	var rateErrSum float64
	var rateErrN, maxWindow int64

	probes := queue[probe]{less: func(x, y probe) bool {
		if x.at != y.at || x.key != y.key {
			return x.at < y.at || x.at == y.at && x.key < y.key
		}
		return !x.allow && y.allow
	}}
	probing := map[[2]int64]bool{}
	runProbes := func(until int64) error {
		for probes.Len() > 0 && probes.s[0].at <= until {
			pr := heap.Pop(&probes).(probe)
			if pr.allow {
				delete(probing, [2]int64{int64(pr.key), pr.at})
			}
			if keys[pr.key].admits != pr.admits {
				continue // something was admitted since: the Retry-After no longer applies
			}
			d, err := decide(pr.at, pr.key, 0)
			if err != nil {
				return err
			}
			if pr.allow {
				res.RetryAfterChecks++
				if !d.Allowed {
					res.RetryAfterLate++
				}
			} else if d.Allowed {
				res.RetryAfterEarly++
			}
		}
		return nil
	}

	var batch int64
	for arr, ok := src.next(); ok; arr, ok = src.next() {
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
		if counting {
			var r algo.Result
			if k.wc, r = algo.Decide(k.wc, t, wp, 0); real > 0 {
				rateErrSum += math.Abs(float64(wp.Rate-r.Remaining-real)) / float64(real)
				rateErrN++
			}
		}
		bin := int((t - start) / binW)
		focus := arr.Key == int32(p.Focus)
		if focus {
			sampleTo(bin)
		}
		d, err := decide(t, arr.Key, 1)
		if err != nil {
			return Result{}, err
		}
		res.Requests++
		exact := real+1 <= limit.Rate
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
			if counting {
				k.wc, _ = algo.Decide(k.wc, t, wp, 1)
			}
		} else {
			res.Denied++
			if exact {
				res.FalseDenies++
			}
			if ra := d.RetryAfter.Microseconds(); ra <= 0 {
				res.RetryAfterLate++ // a denial must name a positive wait
				res.RetryAfterChecks++
			} else if id := [2]int64{int64(arr.Key), t + ra}; !probing[id] {
				probing[id] = true
				heap.Push(&probes, probe{at: t + ra - 1, key: arr.Key, admits: k.admits})
				heap.Push(&probes, probe{at: t + ra, key: arr.Key, allow: true, admits: k.admits})
			}
		}
		if focus && bin < timelineBins {
			if d.Allowed {
				tl.Admitted[bin]++
			} else {
				tl.Denied[bin]++
			}
			tl.Window[bin] = max(tl.Window[bin], after)
		}
		res.digest = mix(mix(mix(res.digest, uint64(t)), uint64(arr.Key)), uint64(res.Admitted))
		src.result(arr, d.Allowed, d.RetryAfter.Microseconds())
	}
	progress(batch)
	if err := runProbes(1<<62 - 1); err != nil {
		return Result{}, err
	}
	sampleTo(timelineBins)

	res.Timeline = tl
	res.RetryAfterHonest = res.RetryAfterLate == 0
	res.FalseAllowRate = float64(res.FalseAllows) / float64(max(res.Requests, 1))
	res.FalseDenyRate = float64(res.FalseDenies) / float64(max(res.Requests, 1))
	res.MaxWindowRatio = float64(maxWindow) / float64(limit.Rate)
	if counting {
		e := rateErrSum / float64(max(rateErrN, 1))
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
	return 8 * float64(sum) / float64(max(n, 1))
}

func mix(h, v uint64) uint64 { return (h ^ v) * 1099511628211 }
