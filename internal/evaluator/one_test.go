package evaluator

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// scripted answers every Decide with its decision and error, and records what it was
// asked.
type scripted struct {
	sluice.Limiter // only Decide is called
	d              sluice.Decision
	rep            sluice.Report
	err            error
	asked          [][]sluice.Request
}

func (s *scripted) Decide(_ context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	s.asked = append(s.asked, append([]sluice.Request(nil), reqs...))
	for i := range reqs {
		ds[i] = s.d
		if reqs[i].N == 0 {
			ds[i].Allowed = true // a look
		}
	}
	return s.rep, s.err
}

// TestEvaluateOne: a request of one item, which Evaluate decides apart, gets what the
// general evaluation gives it, for every answer a store can make: the same outcome, the
// same item afterwards, the same calls to the store.
func TestEvaluateOne(t *testing.T) {
	hour := sluice.PerHour(10)
	store := errors.New("store down")
	answers := []struct {
		name string
		d    sluice.Decision
		err  error
	}{
		{"allowed", sluice.Decision{Allowed: true, Limit: hour, Remaining: 7, ResetAfter: time.Minute}, nil},
		{"allowed, no limit", sluice.Decision{Allowed: true, Remaining: 7}, nil},
		{"denied", sluice.Decision{Limit: hour, Remaining: 1, RetryAfter: time.Second, ResetAfter: time.Hour}, nil},
		{"denied, alone it would pass", sluice.Decision{Limit: hour, Remaining: 5, RetryAfter: time.Second}, nil},
		{"denied, no wait", sluice.Decision{Limit: hour}, nil},
		{"from the deny cache", sluice.Decision{Limit: hour, RetryAfter: time.Second, Path: sluice.PathCache}, nil},
		{"failed open", sluice.Decision{Allowed: true, Limit: hour, Path: sluice.PathOpen}, nil},
		{"failed closed", sluice.Decision{Limit: hour, RetryAfter: time.Second, Path: sluice.PathClosed}, fmt.Errorf("closed: %w", sluice.ErrStoreUnavailable)},
		{"failed closed, remaining", sluice.Decision{Limit: hour, Remaining: 9, RetryAfter: time.Second, Path: sluice.PathClosed}, fmt.Errorf("closed: %w", sluice.ErrStoreUnavailable)},
		{"store error", sluice.Decision{Limit: hour, Remaining: 3}, store},
	}
	items := []Item{
		item("k", hour, 1, false),
		item("k", hour, 2, false),
		item("k", hour, 0, false),
		item("k", hour, 10, false),
		item("k", hour, 11, false),                      // over MaxCost: the general evaluation
		item("k", hour, 1, true),                        // shadow: the general evaluation
		item(strings.Repeat("x", 5000), hour, 1, false), // bound
		{Skip: true},
	}
	blocked := item("k", hour, 1, false)
	blocked.Blocked = true
	items = append(items, blocked)
	for _, a := range answers {
		for i, it := range items {
			t.Run(fmt.Sprintf("%s/%d", a.name, i), func(t *testing.T) {
				ctx := context.Background()
				rep := sluice.Report{StoreCalled: true, StoreLatency: time.Millisecond}
				one, all := &scripted{d: a.d, rep: rep, err: a.err}, &scripted{d: a.d, rep: rep, err: a.err}
				got, want := []Item{it}, []Item{it}
				gotOut, gotErr := Evaluate(ctx, one, got, self)
				wantOut, wantErr := evaluate(ctx, all, want, self)
				if gotErr != wantErr || !reflect.DeepEqual(gotOut, wantOut) {
					t.Errorf("outcome %+v, %v; the general evaluation's %+v, %v", gotOut, gotErr, wantOut, wantErr)
				}
				g, w := got[0], want[0]
				g.first, g.req, g.sum, w.first, w.req, w.sum = 0, 0, 0, 0, 0, 0
				if !reflect.DeepEqual(g, w) {
					t.Errorf("item %+v; the general evaluation's %+v", g, w)
				}
				if !reflect.DeepEqual(one.asked, all.asked) {
					t.Errorf("asked %+v; the general evaluation asked %+v", one.asked, all.asked)
				}
			})
		}
	}
}
