package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestOverlongIdentityIsDecided: a user header of 200 KiB (escaped by the key to about
// 600 KiB, past store.MaxKeyLen) is decided like any other identity, and the per-IP
// policy of the same request is enforced; nothing answers 500.
func TestOverlongIdentityIsDecided(t *testing.T) {
	st, _ := newStore(t)
	mw := mustNew(t, Config{Limiter: st, Policies: []Policy{
		{Name: "per-ip", Limit: sluice.PerHour(2)},
		{Name: "per-user", Limit: sluice.PerHour(100), Key: ByUser(Header("X-User"))},
	}})
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	user := strings.Repeat("{%:}", 50<<10)
	for i, want := range []int{200, 200, 429} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Fatalf("request %d: %d, want %d: %s", i, w.Code, want, w.Body)
		}
	}
}
