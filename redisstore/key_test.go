package redisstore

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestBucketKeysIgnoreOldSuffixes: GCRA, TokenBucket and LeakyBucket limits keep their
// state under ":bucket:<name>:...", and a key that an earlier version wrote under the
// name's old suffix is never read or written: a state there that would deny every request
// if it were read leaves the identity with a full bucket, and the old key keeps its value
// and TTL until it expires.
func TestBucketKeysIgnoreOldSuffixes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clock := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	red := open(t, srv.URL(), WithClock(func() time.Time { return clock }))
	ctx := context.Background()
	now := algo.Micros(clock)
	for _, a := range []sluice.Algorithm{sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket} {
		l := sluice.Limit{Algorithm: a, Rate: 10, Period: time.Second}
		id := "old:" + a.String()
		if got, want := red.Key(id, l), "sluice:{"+id+"}:bucket:"+a.String()+":10:1000000:0"; got != want {
			t.Fatalf("%v: key %q, want %q", a, got, want)
		}
		// Two doubles: read as a TAT, an hour ahead (every request denied); read as the
		// old token bucket's state, a credit far above the burst at now; as the old leaky
		// bucket's, a level far above it.
		old := "sluice:{" + id + "}:" + a.String() + ":10:1000000:0"
		var v [16]byte
		binary.LittleEndian.PutUint64(v[:8], math.Float64bits(float64(now+3600_000_000)))
		binary.LittleEndian.PutUint64(v[8:], math.Float64bits(float64(now)))
		srv.MustDo("SET", old, string(v[:]), "PX", "600000")
		d, err := red.AllowN(ctx, id, l, 1)
		if err != nil || !d.Allowed || d.Remaining != 9 || d.ResetAfter != 100*time.Millisecond {
			t.Fatalf("%v: first decision %+v, %v; want a full bucket's (9 left, full in 100ms)", a, d, err)
		}
		if got := srv.MustDo("GET", old); got != string(v[:]) {
			t.Errorf("%v: the old key changed: %q", a, got)
		}
		if ttl, _ := strconv.Atoi(srv.MustDo("PTTL", old)); ttl <= 0 || ttl > 600000 {
			t.Errorf("%v: the old key's TTL is %d ms, want its own", a, ttl)
		}
		if srv.MustDo("EXISTS", red.Key(id, l)) != "1" {
			t.Errorf("%v: the decision wrote no key under the new suffix", a)
		}
	}
}
