package evaluator

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

func self(it *Item) *Item { return it }

func item(key string, l sluice.Limit, n int64, shadow bool) Item {
	return Item{Request: sluice.Request{Key: key, Limit: l, N: n, Shadow: shadow, Policy: key}}
}

func remaining(t *testing.T, s *memory.Store, key string, l sluice.Limit) int64 {
	t.Helper()
	d, err := s.AllowN(context.Background(), key, l, 0)
	if err != nil {
		t.Fatal(err)
	}
	return d.Remaining
}

// TestEvaluate: the semantics of the package doc, on a real memory store with a frozen
// clock: all or nothing, shadow limits spent only when the request passes, duplicates
// merged, impossible costs and blocked items over without spending, and every asked item
// decided.
func TestEvaluate(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	wide := sluice.PerHour(10)
	narrow := sluice.PerHour(2)
	ctx := context.Background()

	t.Run("denied spends nothing, shadow looked at", func(t *testing.T) {
		s := memory.New(memory.WithClock(func() time.Time { return now }))
		defer s.Close()
		for i, want := range []bool{true, true, false, false} {
			items := []Item{item("w", wide, 1, false), item("n", narrow, 1, false), item("sh", wide, 1, true)}
			out, err := Evaluate(ctx, s, items, self)
			if err != nil {
				t.Fatal(err)
			}
			if out.Allowed != want {
				t.Fatalf("request %d: allowed %v, want %v", i, out.Allowed, want)
			}
			for j := range items {
				if !items[j].Decided {
					t.Fatalf("request %d: item %d undecided", i, j)
				}
			}
			if !want && (!items[1].Blocks() || items[0].Blocks() || items[0].Decision.RetryAfter != 0 || out.RetryAfter != items[1].Decision.RetryAfter) {
				t.Fatalf("request %d: %+v, %+v", i, items, out)
			}
		}
		if r := remaining(t, s, "w", wide); r != 8 {
			t.Errorf("wide: %d left, want 8 (denied requests spent nothing)", r)
		}
		if r := remaining(t, s, "sh", wide); r != 8 {
			t.Errorf("shadow: %d left, want 8 (spent only when the request passed)", r)
		}
	})

	t.Run("a shadow over its limit never blocks", func(t *testing.T) {
		s := memory.New(memory.WithClock(func() time.Time { return now }))
		defer s.Close()
		for i := range 4 {
			items := []Item{item("w", wide, 1, false), item("sh", narrow, 1, true)}
			out, err := Evaluate(ctx, s, items, self)
			if err != nil || !out.Allowed {
				t.Fatalf("request %d: %+v, %v", i, out, err)
			}
			if i >= 2 && !items[1].Over() {
				t.Fatalf("request %d: the shadow limit is not over: %+v", i, items[1])
			}
		}
	})

	t.Run("duplicates are one request for the sum", func(t *testing.T) {
		s := memory.New(memory.WithClock(func() time.Time { return now }))
		defer s.Close()
		items := []Item{item("d", wide, 3, false), item("d", wide, 4, false)}
		out, err := Evaluate(ctx, s, items, self)
		if err != nil || !out.Allowed {
			t.Fatal(out, err)
		}
		if items[0].Decision.Remaining != 7 || items[1].Decision.Remaining != 3 {
			t.Fatalf("remaining after each naming: %d, %d; want 7, 3", items[0].Decision.Remaining, items[1].Decision.Remaining)
		}
		items = []Item{item("d", wide, 2, false), item("d", wide, 2, false)}
		if out, err := Evaluate(ctx, s, items, self); err != nil || out.Allowed {
			t.Fatalf("4 more of 3 left: %+v, %v", out, err)
		}
		if r := remaining(t, s, "d", wide); r != 3 {
			t.Errorf("%d left, want 3", r)
		}
	})

	t.Run("impossible cost and blocked items deny without spending", func(t *testing.T) {
		s := memory.New(memory.WithClock(func() time.Time { return now }))
		defer s.Close()
		items := []Item{item("a", wide, 1, false), item("big", narrow, 3, false)}
		out, err := Evaluate(ctx, s, items, self)
		if err != nil || out.Allowed || !items[1].TooBig || !items[0].Decided {
			t.Fatalf("%+v %+v %v", out, items, err)
		}
		blocked := item("b", wide, 1, false)
		blocked.Blocked = true
		items = []Item{item("a", wide, 1, false), blocked, {Skip: true}}
		if out, err := Evaluate(ctx, s, items, self); err != nil || out.Allowed || items[2].Decided || items[2].Over() {
			t.Fatalf("%+v %+v %v", out, items, err)
		}
		if r := remaining(t, s, "a", wide); r != 10 {
			t.Errorf("%d left, want 10", r)
		}
	})
}

// BenchmarkEvaluate: the evaluator's own allocations on top of the store's.
func BenchmarkEvaluate(b *testing.B) {
	s := memory.New()
	defer s.Close()
	items := []Item{item("w", sluice.PerSecond(500_000), 1, false), item("n", sluice.PerSecond(500_000), 1, false)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Evaluate(ctx, s, items, self); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEvaluateOne: a request of one enforced item, the common one, on the memory
// store.
//
//	go test -run '^$' -bench BenchmarkEvaluateOne -benchmem ./internal/evaluator
func BenchmarkEvaluateOne(b *testing.B) {
	s := memory.New()
	defer s.Close()
	items := []Item{item("w", sluice.Limit{Rate: 1e6, Period: time.Second, Burst: 1e9}, 1, false)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		items[0].Decided = false
		if out, err := Evaluate(ctx, s, items, self); err != nil || !out.Allowed {
			b.Fatal(out, err)
		}
	}
}
