package httplimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/memory"
)

// discard is a ResponseWriter that keeps nothing but a reusable header map, so the
// benchmarks measure the middleware, not a recorder.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkMiddleware measures one request through the middleware on the memory store
// (real clock), over 10k client IPs, with limits high enough that every request passes.
func BenchmarkMiddleware(b *testing.B) {
	hasher, _ := keys.NewHasher(make([]byte, 32), keys.Hex)
	big := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1 << 30, Period: 1 << 40}
	cases := []struct {
		name     string
		policies []Policy
	}{
		{"1-policy", []Policy{{Name: "per-ip", Limit: big}}},
		{"3-policies-atomic", []Policy{
			{Name: "per-ip", Limit: big},
			{Name: "per-key", Limit: big, Key: ByAPIKey(hasher, Header("X-API-Key")), PartitionKey: true},
			{Name: "route", Route: "GET /items/{id}", Limit: big},
		}},
	}
	const clients = 10_000
	reqs := make([]*http.Request, clients)
	for i := range reqs {
		r := httptest.NewRequest("GET", "/items/42", nil)
		r.RemoteAddr = fmt.Sprintf("10.%d.%d.%d:1234", i>>16&255, i>>8&255, i&255)
		r.Header.Set("X-API-Key", fmt.Sprintf("key-%d", i))
		reqs[i] = r
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			store := memory.New()
			defer store.Close()
			h := mustNew(b, Config{Limiter: store, Policies: c.policies}).Handler(okHandler)
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &discard{h: http.Header{}}
				for pb.Next() {
					r := reqs[next.Add(1)%clients]
					clear(w.h)
					h.ServeHTTP(w, r)
				}
			})
		})
	}
}
