package memory

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// A denied batch spends nothing, so a request in it that would have passed alone reports
// the state as it is: the Remaining and ResetAfter a look (n == 0) reports.
func TestAllowMultiDeniedReportsUnspentState(t *testing.T) {
	ctx := context.Background()
	for _, a := range store.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			s, _ := newTestStore(t)
			tight := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 1, Period: 5 * time.Second}
			wide := sluice.Limit{Algorithm: a, Rate: 100, Period: time.Hour}
			reqs := []sluice.Request{{Key: "a", Limit: tight, N: 1}, {Key: "b", Limit: wide, N: 1}}
			if _, err := sluice.AllowMulti(ctx, s, reqs); err != nil {
				t.Fatal(err)
			}
			ds, err := sluice.AllowMulti(ctx, s, reqs)
			if err != nil {
				t.Fatal(err)
			}
			look, _ := s.AllowN(ctx, "b", wide, 0)
			if d := ds[1]; d.Allowed || d.RetryAfter != 0 || d.Remaining != look.Remaining || d.ResetAfter != look.ResetAfter {
				t.Errorf("denied batch reported %+v for the passing request; its state is %+v", d, look)
			}
			if look.Remaining != 99 {
				t.Errorf("remaining %d after one admitted batch, want 99", look.Remaining)
			}
		})
	}
}
