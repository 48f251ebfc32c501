package evaluator

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/store"
)

// TestOverlongKeyIsDecided: an item whose key is past store.MaxKeyLen (and past it
// three times over once a store escapes it) is decided under its keys.Bound form, with
// the request's other limits, on memory and on Redis: never an error.
func TestOverlongKeyIsDecided(t *testing.T) {
	long := "envoy/d/user=vip" + strings.Repeat("%{}", store.MaxKeyLen/2)
	stores := map[string]func(t *testing.T) sluice.Limiter{
		"memory": func(t *testing.T) sluice.Limiter {
			s := memory.New()
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T) sluice.Limiter {
			s, err := redisstore.Open(redistest.Start(t).URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			lim := open(t)
			for i, want := range []bool{true, true, false} {
				items := []Item{item("addr", sluice.PerHour(2), 1, false), item(long, sluice.PerHour(100), 1, false)}
				out, err := Evaluate(context.Background(), lim, items, self)
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
				if out.Allowed != want {
					t.Fatalf("request %d: allowed %v, want %v", i, out.Allowed, want)
				}
				if items[1].Key != keys.Bound(long) {
					t.Fatalf("request %d: the long key was decided as %d bytes, not its bound form", i, len(items[1].Key))
				}
			}
			d, err := sluice.AllowN(context.Background(), lim, keys.Bound(long), sluice.PerHour(100), 0)
			if err != nil || d.Remaining != 98 {
				t.Errorf("the long key's limit: %+v %v, want 98 left", d, err)
			}
		})
	}
}
