package sim

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Arrival is one request of a traffic pattern: at At microseconds after the start of the
// run, for the key with index Key, costing one unit.
type Arrival struct {
	At  int64
	Key int32
}

// Pattern is a deterministic kind of traffic against one Limit.
//
// A pattern is open-loop (its arrivals do not depend on the decisions) unless
// HonourRetryAfter is set, in which case each key is one client that sends its demanded
// requests one at a time: a denied request is sent again exactly RetryAfter later, and the
// client's later requests wait behind it.
type Pattern struct {
	// Name identifies the pattern on the command line and in every output.
	Name string
	// Description says, in a sentence, what the traffic is and what it shows.
	Description string
	// Limit is the limit applied to every key; its Algorithm is replaced by each run's.
	Limit sluice.Limit
	// Duration is the span of the arrivals; the run's virtual clock starts at Epoch.
	Duration time.Duration
	// Keys is the number of distinct keys; Arrival.Key is in [0, Keys).
	Keys int
	// Focus is the key whose timeline the report charts (usually the busiest).
	Focus int
	// HonourRetryAfter makes the pattern closed-loop as described above.
	HonourRetryAfter bool
	// Arrivals returns the arrivals (for HonourRetryAfter, the demand); Run puts them in
	// order of At (stably) if they are not. It is called once per Run with a generator
	// seeded from the run's seed and the pattern's name, and must depend on nothing else.
	Arrivals func(r *rand.Rand) []Arrival
	// Population, if set, is the crowd the pattern's keys are a sample of. Run then also
	// measures the sliding window counter as a rate estimator on the whole crowd, which
	// can be far larger than a run through a store could be (Report.Populations).
	Population *Population
}

// Epoch is the virtual instant every run starts at: 2026-01-01T00:00:00Z. Window algorithms
// align their windows to multiples of Period since the Unix epoch, so for every Period that
// divides a day, Epoch is a window boundary.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The limit most patterns use: 20 per second, over 30 seconds of virtual time.
var (
	baseLimit    = sluice.Limit{Rate: 20, Period: time.Second}
	baseDuration = 30 * time.Second
)

// Patterns returns the built-in patterns. scale (> 0; 1 is the default) multiplies the
// number of requests: the duration of the single-key patterns and the number of keys of the
// many-key ones, so that a test can run all of them in a fraction of a second.
//
// The cloudflare pattern is a sample of 27,000 sources over 10 minutes from
// CloudflarePopulation's 270,000 (and 2,000 near the threshold), which Run measures whole;
// its key 0, charted, is the sample's fastest source. For it a scale below 1 shrinks the
// sample and the population alike, and a scale above 1 lengthens the population's span
// instead: at 144 it is a day, about 400 million requests, Cloudflare's sample size.
func Patterns(scale float64) []Pattern {
	if !(scale > 0) {
		scale = 1
	}
	dur := scaleDuration(baseDuration, scale)
	rate := float64(baseLimit.Rate) / baseLimit.Period.Seconds() // per second
	cf := CloudflarePopulation(scaleInt(CloudflareSources, min(scale, 1)), scaleDuration(10*time.Minute, max(scale, 1)), scaleInt(2000, min(scale, 1)))
	cfKeys := scaleInt(27_000, min(scale, 1))
	one := func(name, description string, arrivals func(*rand.Rand) []Arrival) Pattern {
		return Pattern{Name: name, Description: description, Limit: baseLimit, Duration: dur, Keys: 1, Arrivals: arrivals}
	}
	return []Pattern{
		one("steady-0.5x", "One client sending at exactly half the limit, evenly spaced. Every algorithm admits everything.",
			func(*rand.Rand) []Arrival { return steady(dur, rate*0.5) }),
		one("steady-1x", "One client sending at exactly the limit, evenly spaced. Every algorithm should admit everything; an algorithm that denies here is wrong.",
			func(*rand.Rand) []Arrival { return steady(dur, rate) }),
		one("steady-2x", "One client sending at twice the limit, evenly spaced. Half should be denied; the buckets admit their burst first.",
			func(*rand.Rand) []Arrival { return steady(dur, rate*2) }),
		one("poisson", "One client with Poisson arrivals averaging exactly the limit: random clumps above it and lulls below.",
			func(r *rand.Rand) []Arrival { return poisson(r, dur, rate, 0) }),
		one("on-off", "Bursts at 3× the limit for 0.5 s, then 1 s of silence: 1× on average, but each burst overruns.",
			func(r *rand.Rand) []Arrival { return onOff(r, dur, rate*3, 500*time.Millisecond, time.Second) }),
		one("boundary", "Clients synchronised to wall-clock boundaries: the limit in the 50 ms before each window boundary and the limit again in the 50 ms after. The fixed window admits twice the limit within a tenth of a period at the first boundary.",
			func(r *rand.Rand) []Arrival {
				return boundary(r, dur, baseLimit.Period, int(2*baseLimit.Rate), baseLimit.Period/20)
			}),
		one("cdn-batch", "A CDN edge forwarding requests in batches: every 0.5 s on average, a batch of 10 on average (geometric) arriving in the same microsecond.",
			func(r *rand.Rand) []Arrival { return batches(r, dur, 500*time.Millisecond, float64(baseLimit.Rate)/2) }),
		{
			Name:        "zipf-keys",
			Description: "1000 keys with Zipf popularity (s = 1.1): the hottest key sends at about 2× the limit, the long tail at a trickle. Charted: the hottest key.",
			Limit:       baseLimit, Duration: baseDuration, Keys: scaleInt(1000, scale),
			Arrivals: func(r *rand.Rand) []Arrival { return zipfKeys(r, baseDuration, scaleInt(1000, scale), 1.1, 2*rate) },
		},
		{
			Name:        "retry-after",
			Description: "Ten clients, one key each, wanting 1.5× the limit; each waits exactly the Retry-After it is given and sends the denied request again, then the rest of its backlog.",
			Limit:       baseLimit, Duration: dur, Keys: 10, HonourRetryAfter: true,
			Arrivals: func(r *rand.Rand) []Arrival {
				var all []Arrival
				for k := range 10 {
					all = append(all, poisson(r, dur, rate*1.5, int32(k))...)
				}
				sortArrivals(all)
				return all
			},
		},
		{
			Name:        "cloudflare",
			Description: "Cloudflare's accuracy workload, synthesised: 27,000 sources under one threshold of 50/min for 10 minutes, Pareto-distributed rates, nearly all far below the threshold; a sample of the 270,000-source population compared in the report with Cloudflare's published figures. Charted: the fastest source.",
			Limit:       CloudflareLimit, Duration: 10 * time.Minute, Keys: cfKeys,
			Arrivals:   func(r *rand.Rand) []Arrival { return cf.sample(r, cfKeys, 10*time.Minute) },
			Population: &cf,
		},
	}
}

// PatternNames lists the names of the built-in patterns.
func PatternNames() []string {
	var names []string
	for _, p := range Patterns(1) {
		names = append(names, p.Name)
	}
	return names
}

// SelectPatterns returns the built-in patterns named in list, a comma-separated list of
// names or "all", in the built-in order.
func SelectPatterns(list string, scale float64) ([]Pattern, error) {
	all := Patterns(scale)
	if l := strings.TrimSpace(list); l == "all" || l == "" {
		return all, nil
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if !slices.ContainsFunc(all, func(p Pattern) bool { return p.Name == n }) {
			return nil, fmt.Errorf("unknown pattern %q (want all or some of %s)", n, strings.Join(PatternNames(), ", "))
		}
		names = append(names, n)
	}
	return slices.DeleteFunc(all, func(p Pattern) bool { return !slices.Contains(names, p.Name) }), nil
}

// SelectAlgorithms parses a comma-separated list of the names AlgorithmNames lists, or
// "all"; any other name is an error that lists those.
func SelectAlgorithms(list string) ([]sluice.Algorithm, error) {
	if l := strings.TrimSpace(list); l == "all" || l == "" {
		return store.Algorithms(), nil
	}
	var out []sluice.Algorithm
	for _, n := range strings.Split(list, ",") {
		a, err := sluice.ParseAlgorithm(n)
		if err != nil || !slices.Contains(store.Algorithms(), a) {
			return nil, fmt.Errorf("unknown algorithm %q: a simulation runs %s", strings.TrimSpace(n), strings.Join(AlgorithmNames(), ", "))
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out, nil
}

func scaleDuration(d time.Duration, scale float64) time.Duration {
	out := time.Duration(float64(d) * scale).Truncate(time.Second)
	return max(out, time.Second)
}

func scaleInt(n int, scale float64) int { return max(int(math.Round(float64(n)*scale)), 1) }

func sortArrivals(a []Arrival) {
	slices.SortStableFunc(a, func(x, y Arrival) int {
		if x.At != y.At {
			return cmp.Compare(x.At, y.At)
		}
		return int(x.Key) - int(y.Key)
	})
}

// steady sends perSecond requests per second on key 0, evenly spaced from the start.
func steady(d time.Duration, perSecond float64) []Arrival {
	gap := 1e6 / perSecond
	var out []Arrival
	for i := 0; ; i++ {
		at := int64(math.Round(float64(i) * gap))
		if at >= d.Microseconds() {
			return out
		}
		out = append(out, Arrival{At: at})
	}
}

// poisson sends Poisson arrivals at perSecond on one key.
func poisson(r *rand.Rand, d time.Duration, perSecond float64, key int32) []Arrival {
	var out []Arrival
	poissonAt(r, float64(d.Microseconds()), 1e6/perSecond, func(at int64) {
		out = append(out, Arrival{At: at, Key: key})
	})
	return out
}

// poissonAt calls each with the instants, in µs truncated, of Poisson arrivals in [0, end)
// with mean gap, drawn from r.
func poissonAt(r *rand.Rand, end, gap float64, each func(at int64)) {
	for at := r.ExpFloat64() * gap; at < end; at += r.ExpFloat64() * gap {
		each(int64(at))
	}
}

// onOff alternates on (Poisson at perSecond) and off, starting at a random phase.
func onOff(r *rand.Rand, d time.Duration, perSecond float64, on, off time.Duration) []Arrival {
	var out []Arrival
	cycle := (on + off).Microseconds()
	phase := r.Int64N(cycle)
	for _, a := range poisson(r, d, perSecond, 0) {
		if (a.At+phase)%cycle < on.Microseconds() {
			out = append(out, a)
		}
	}
	return out
}

// boundary sends n requests around every window boundary k·period: n/2 uniformly in the
// half before it, [b-half, b), and the rest uniformly in the half after, [b, b+half).
func boundary(r *rand.Rand, d, period time.Duration, n int, half time.Duration) []Arrival {
	var out []Arrival
	P, h := period.Microseconds(), half.Microseconds()
	for b := P; b+h <= d.Microseconds(); b += P {
		for i := range n {
			at := b + r.Int64N(h)
			if i < n/2 {
				at = b - 1 - r.Int64N(h)
			}
			out = append(out, Arrival{At: at})
		}
	}
	sortArrivals(out)
	return out
}

// batches sends batches at exponentially distributed gaps (mean gap), each of a
// geometrically distributed size ≥ 1 with the given mean, all in one microsecond.
func batches(r *rand.Rand, d, gap time.Duration, meanSize float64) []Arrival {
	var out []Arrival
	t := r.ExpFloat64() * float64(gap.Microseconds())
	p := 1 / meanSize
	for t < float64(d.Microseconds()) {
		size := 1
		for r.Float64() >= p {
			size++
		}
		for range size {
			out = append(out, Arrival{At: int64(t)})
		}
		t += r.ExpFloat64() * float64(gap.Microseconds())
	}
	return out
}

// zipfKeys sends Poisson arrivals over keys of Zipf popularity (key 0 the most popular),
// at an aggregate rate that gives key 0 hotPerSecond.
func zipfKeys(r *rand.Rand, d time.Duration, keys int, s, hotPerSecond float64) []Arrival {
	var h float64
	for k := 1; k <= keys; k++ {
		h += math.Pow(float64(k), -s)
	}
	total := hotPerSecond * h // P(key 0) = 1/h
	z := rand.NewZipf(r, s, 1, uint64(keys-1))
	out := poisson(r, d, total, 0)
	for i := range out {
		out[i].Key = int32(z.Uint64())
	}
	return out
}
