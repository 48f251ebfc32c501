package quota

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestDemand(t *testing.T) {
	for _, tc := range []struct {
		allowed, denied uint64
		elapsed, period time.Duration
		limit, want     int64
	}{
		{50, 50, time.Second, time.Second, 1000, 100},
		{50, 50, 2 * time.Second, time.Second, 1000, 50},
		{1, 0, 3 * time.Second, time.Second, 1000, 1}, // rounded up
		{10, 0, time.Second, time.Minute, 1000, 600},
		{10, 0, time.Second, time.Minute, 100, 100}, // capped
		{7, 0, 0, time.Second, 1000, 7},             // no time_elapsed: one period
		{math.MaxUint64, 1, time.Second, time.Second, 1000, 1000},
		{math.MaxUint64 / 2, 0, time.Nanosecond, time.Hour, 5, 5},
		{0, 0, time.Second, time.Second, 1000, 0},
	} {
		if got := Demand(tc.allowed, tc.denied, tc.elapsed, tc.period, tc.limit); got != tc.want {
			t.Errorf("Demand(%d, %d, %v, %v, %d) = %d, want %d", tc.allowed, tc.denied, tc.elapsed, tc.period, tc.limit, got, tc.want)
		}
	}
}

func TestWeightAndTokenBucket(t *testing.T) {
	if Weight(0, 10) != 0 || Weight(1, MaxRate) != 1 || Weight(160, 10) != WeightScale || Weight(1000, 10) != WeightScale ||
		Weight(80, 10) != WeightScale/2 || Weight(10, 10) != WeightScale/DemandCap {
		t.Error("Weight")
	}
	if TokenBucket(500, 1000, 100) != 50 || TokenBucket(1, 1000, 100) != 1 || TokenBucket(0, 1000, 100) != 1 ||
		TokenBucket(MaxRate, MaxRate, MaxRate) != MaxRate {
		t.Error("TokenBucket")
	}
}

// TestShareBound drives Memory with random reports, demands, TTLs and clock steps, and
// checks after every report that the live shares sum to at most the rate, as Share
// promises, and that a client alone on a bucket gets at least the floor.
func TestShareBound(t *testing.T) {
	clock := clocktest.New(time.Unix(1e9, 0))
	m := NewMemory(clock.Now)
	rng := rand.New(rand.NewPCG(1, 2))
	rates := []int64{0, 1, 3, 10, 1000, MaxRate}
	out := make([]Assignment, 1)
	for i := range 20000 {
		rate := rates[i/3000%len(rates)]
		rep := Report{
			Key:    fmt.Sprint("b", i%3, "/", rate), // a bucket keeps its rate (a reload lowering it is another matter)
			Client: fmt.Sprint("c", rng.IntN(40)),
			Rate:   rate,
			Weight: Weight(rng.Int64N(rate+2)*int64(rng.IntN(2)), max(rate, 1)),
			TTL:    time.Duration(1+rng.IntN(5)) * time.Second,
		}
		if err := m.Rebalance(context.Background(), []Report{rep}, out); err != nil {
			t.Fatal(err)
		}
		a := out[0]
		if a.Rate < 0 || a.Assigned > rate || a.Rate > a.Assigned {
			t.Fatalf("report %d %+v: %+v breaks the bound", i, rep, a)
		}
		// The store's own sum agrees with a recount of live clients.
		b := m.buckets[rep.Key]
		var sum int64
		for _, c := range b.clients {
			sum += c.assigned
		}
		if sum != a.Assigned {
			t.Fatalf("report %d: recount %d, store says %d", i, sum, a.Assigned)
		}
		clock.Advance(time.Duration(rng.IntN(300)) * time.Millisecond)
	}
}

func TestFloorLetsANewClientStart(t *testing.T) {
	clock := clocktest.New(time.Unix(1e9, 0))
	m := NewMemory(clock.Now)
	out := make([]Assignment, 1)
	rep := func(c string, demand int64) Assignment {
		m.Rebalance(context.Background(), []Report{{Key: "b", Client: c, Rate: 1000, Weight: Weight(demand, 1000), TTL: 3 * time.Second}}, out)
		return out[0]
	}
	// Three busy clients settle on the whole bucket but the free floor.
	for range 3 {
		for _, c := range []string{"a", "b", "c"} {
			rep(c, 1000)
		}
	}
	if a := rep("a", 1000); a.Assigned > 1000-1000/40 {
		t.Fatalf("settled at %+v: no floor left free", a)
	}
	if a := rep("new", 0); a.Rate < 1000/50 {
		t.Fatalf("new client got %+v, want at least the floor %d", a, 1000/50)
	}
	// A silent client loses its share after its TTL.
	clock.Advance(2 * time.Second)
	rep("a", 1000)
	rep("b", 1000)
	clock.Advance(1500 * time.Millisecond) // c and new expired; a and b did not
	if a := rep("a", 1000); a.Clients != 2 {
		t.Fatalf("after the TTL: %+v, want 2 clients", a)
	}
}

// TestDifferential runs the same reports through Memory and Redis (rebalance.lua) on
// one clock and demands identical assignments.
func TestDifferential(t *testing.T) {
	srv := redistest.Start(t)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	clock := clocktest.New(time.Unix(1.7e9, 0))
	mem := NewMemory(clock.Now)
	rs := NewRedis(func() rueidis.Client { return client }, "q:", clock.Now)
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	rates := []int64{0, 1, 7, 1000, 123457, MaxRate}
	for i := range 300 {
		reps := make([]Report, 1+rng.IntN(4))
		for j := range reps {
			rate := rates[rng.IntN(len(rates))]
			reps[j] = Report{
				Key:    fmt.Sprint("k", rng.IntN(4)),
				Client: fmt.Sprintf("%016x", rng.IntN(12)),
				Rate:   rate,
				Weight: Weight(rng.Int64N(rate+1), max(rate, 1)),
				TTL:    2 * time.Second,
			}
		}
		a, b := make([]Assignment, len(reps)), make([]Assignment, len(reps))
		if err := mem.Rebalance(ctx, reps, a); err != nil {
			t.Fatal(err)
		}
		if err := rs.Rebalance(ctx, reps, b); err != nil {
			t.Fatal(err)
		}
		for j := range reps {
			if a[j] != b[j] {
				t.Fatalf("step %d report %+v: memory %+v, redis %+v", i, reps[j], a[j], b[j])
			}
		}
		clock.Advance(time.Duration(rng.IntN(700)) * time.Millisecond)
	}
}
