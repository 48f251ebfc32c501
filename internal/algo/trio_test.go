package algo

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

var update = flag.Bool("update", false, "rewrite testdata/buckets.golden from the current machine")

// trioLimit is a random valid bucket limit: rates and periods of every scale, with and
// without a part of a µs per unit (S > 1), bursts from 1 to beyond the rate.
func trioLimit(rng *rand.Rand) sluice.Limit {
	for {
		periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, time.Second, 3 * time.Second,
			time.Minute, 17 * time.Minute, time.Hour, 24 * time.Hour}
		l := sluice.Limit{
			Rate:   1 + rng.Int64N([]int64{3, 10, 100, 1000, 1_000_000}[rng.IntN(5)]),
			Period: periods[rng.IntN(len(periods))] + time.Duration(rng.Int64N(3))*time.Microsecond,
		}
		if rng.IntN(2) == 0 {
			l.Burst = 1 + rng.Int64N(2*l.Rate)
		}
		if l.Validate() == nil {
			return l
		}
	}
}

// trioRun drives one key of limit l through a random history drawn from seed: decisions,
// looks, reservations and their cancellations, refunds of earlier spends and settlements
// of estimated costs (charges and refunds), with the clock stepping back one step in six.
// It returns one line per operation: what was asked and every observable answer, the
// Result or Reservation, then a look (cost 0), a probe of the whole burst on a copy, and
// the time until ExpiresAt (the Redis TTL and the memory sweeper's instant), 0 once it
// has passed.
func trioRun(l sluice.Limit, seed uint64, steps int) []string {
	rng := rand.New(rand.NewPCG(seed, 41))
	p := ParamsOf(l)
	var s State
	var out []string
	var spends []Reserved // allowed decisions, for refunds and settlements
	var last Reservation
	now := epoch + rng.Int64N(p.Period)
	for i := 0; i < steps; i++ {
		if rng.IntN(6) == 0 {
			now -= rng.Int64N(2*p.Period + 1) // a clock step back
		} else {
			now += randomStep(rng, now, p)
		}
		n := rng.Int64N(p.Burst + 1)
		if rng.IntN(2) == 0 {
			n = rng.Int64N(min(p.Burst, 3) + 1)
		}
		var op string
		switch k := rng.IntN(10); {
		case k < 4:
			var r Result
			s, r = Decide(s, now, p, n)
			op = fmt.Sprintf("decide %d %s", n, trioResult(r))
			if r.Allowed && n > 0 {
				spends = append(spends, ReservedOf(p, n, now, r))
			}
		case k < 6:
			maxWait := []int64{-1, 0, rng.Int64N(p.Period + 1)}[rng.IntN(3)]
			s, last = ReserveGCRA(s, now, p, n, maxWait)
			op = fmt.Sprintf("reserve %d %d %v %d %d", n, maxWait, last.OK, last.Delay, last.At-now)
		case k < 7:
			var ok bool
			s, ok = CancelReservation(s, now, last)
			op = fmt.Sprintf("cancel %v", ok)
		case k < 8 && len(spends) > 0:
			j := rng.IntN(len(spends))
			sp := spends[j]
			spends = append(spends[:j], spends[j+1:]...)
			s = Refund(s, now, p, sp.N, sp.At)
			op = fmt.Sprintf("refund %d at %d", sp.N, sp.At-now)
		case len(spends) > 0:
			j := rng.IntN(len(spends))
			sp := spends[j]
			spends = append(spends[:j], spends[j+1:]...)
			c := rng.Int64N(2*sp.N + 2)
			s = Settle(s, now, p, sp, c)
			op = fmt.Sprintf("settle %d as %d at %d full %d", sp.N, c, sp.At-now, sp.FullAt-now)
		default:
			op = "none"
		}
		_, look := Decide(s, now, p, 0)
		_, all := Decide(s, now, p, p.Burst)
		exp := max(ExpiresAt(s, p)-now, 0) // 0: equivalent to empty
		out = append(out, fmt.Sprintf("%s | look %s | all %s | expires %d", op, trioResult(look), trioResult(all), exp))
	}
	return out
}

// trioResult is r in few characters: allowed (0/1), Remaining, ResetAfter, RetryAfter.
func trioResult(r Result) string {
	ok := 0
	if r.Allowed {
		ok = 1
	}
	return fmt.Sprintf("%d %d %d %d", ok, r.Remaining, r.ResetAfter, r.RetryAfter)
}

// trioSeeds are the histories TestBucketTrio runs: the limit of each is trioLimit of a
// generator seeded with it.
const trioSeeds, trioSteps = 25, 100

// TestBucketTrio: GCRA, TokenBucket and LeakyBucket are one machine under three names.
// From every random history, clock steps back, reservations, refunds and settlements
// included, the three names give the same answers, and those answers are the ones in
// testdata/buckets.golden, which pins the machine's observable behaviour: a change to
// any result of the bucket machine fails here, and must be made on purpose (go test
// -run TestBucketTrio -update).
func TestBucketTrio(t *testing.T) {
	var got []string
	for seed := uint64(1); seed <= trioSeeds; seed++ {
		l := trioLimit(rand.New(rand.NewPCG(seed, 7)))
		head := fmt.Sprintf("# seed %d: %v (%+v)", seed, l.With(sluice.GCRA), ParamsOf(l))
		want := trioRun(l.With(sluice.GCRA), seed, trioSteps)
		for _, a := range []sluice.Algorithm{sluice.TokenBucket, sluice.LeakyBucket} {
			other := trioRun(l.With(a), seed, trioSteps)
			for i := range want {
				if other[i] != want[i] {
					t.Errorf("%s: step %d: %v gives\n\t%s\ngcra gives\n\t%s", head, i, a, other[i], want[i])
					break
				}
			}
		}
		got = append(got, head)
		got = append(got, want...)
	}
	const golden = "testdata/buckets.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	head := ""
	for i := 0; sc.Scan(); i++ {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			head = line
		}
		if i >= len(got) {
			t.Fatalf("%s has more lines than the run (%d)", golden, len(got))
		}
		if got[i] != line {
			t.Fatalf("%s, line %d:\ngot  %s\nwant %s", head, i+1, got[i], line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}
