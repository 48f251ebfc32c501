package httplimit

import (
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/memory"
)

// TestRouteSets: within a RouteSet the most specific pattern alone applies; sets are
// independent, so one set's "/v1/items" does not hide another set's "/v1/".
func TestRouteSets(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	lim := sluice.PerHour(10)
	mw := mustNew(t, Config{Limiter: mem, Policies: []Policy{
		{Name: "a /v1/", Route: "/v1/", RouteSet: "a", Limit: lim},
		{Name: "a POST /v1/items", Route: "POST /v1/items", RouteSet: "a", Limit: lim},
		{Name: "b /v1/", Route: "/v1/", RouteSet: "b", Limit: lim},
		{Name: "default /v1/", Route: "/v1/", Limit: lim},
	}})
	w := do(mw.Handler(okHandler), "POST", "/v1/items", "192.0.2.1:1")
	want := `"a POST /v1/items";q=10;w=3600, "b /v1/";q=10;w=3600, "default /v1/";q=10;w=3600`
	if p := w.Header().Get("RateLimit-Policy"); w.Code != 200 || p != want {
		t.Errorf("%d, RateLimit-Policy %q, want %q", w.Code, p, want)
	}
}
