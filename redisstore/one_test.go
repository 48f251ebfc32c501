package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// TestDecideLuaOneKeyAgainstGeneral: decide.lua's branch for a call of one key decides as
// its general path. For every algorithm it runs the script and a copy whose branch is
// switched off on two keys, with the same random requests at the same instants (a key of
// another type at the start included), and demands the same replies, the same errors and
// the same state (DUMP) with the same expiry.
func TestDecideLuaOneKeyAgainstGeneral(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, srv.URL())
	cn, err := s.usable()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	do := func(args ...string) (string, error) {
		v, err := cn.client.Do(ctx, cn.client.B().Arbitrary(args...).Build()).ToAny()
		return fmt.Sprint(v), err
	}
	for _, alg := range store.Algorithms() {
		for _, foreign := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/foreign=%v", alg, foreign), func(t *testing.T) {
				limit := sluice.Limit{Algorithm: alg, Rate: 5, Period: time.Second}
				li := s.info(limit)
				one := scriptFor([]*call{{items: []item{newItem("k", li, 1)}}})
				general := one
				general.body = strings.Replace(one.body, "if nkeys == 1 then", "if false then", 1)
				if general.body == one.body {
					t.Fatal("decide.lua has no branch 'if nkeys == 1 then' to switch off")
				}
				general = makeScript(general.body)
				keys := [2]string{"one:" + t.Name(), "general:" + t.Name()}
				if foreign {
					for _, k := range keys {
						if _, err := do("HSET", k, "f", "v"); err != nil {
							t.Fatal(err)
						}
					}
				}
				rng := rand.New(rand.NewPCG(uint64(alg), 2))
				now := int64(1_800_000_000_000_000)
				for step := range 300 {
					it := newItem("k", li, int64(rng.IntN(int(limit.MaxCost())+1)))
					args := decideArgs(nil, strconv.FormatInt(now, 10), s.minTTL, it.appendPacked(nil), nil, false, false, nil)
					var got [2]string
					for i, sc := range []script{one, general} {
						v, err := s.eval(ctx, cn.client, sc, keys[i:i+1], args).AsBytes()
						got[i] = strings.ReplaceAll(fmt.Sprintf("%x %v", v, err), sc.sha, "<sha>") // an error names its script
					}
					if got[0] != got[1] {
						t.Fatalf("step %d, cost %d: the branch replied %s, the general path %s", step, it.n, got[0], got[1])
					}
					var dump, ttl [2]string
					for i, k := range keys {
						dump[i], _ = do("DUMP", k)
						ttl[i], _ = do("PTTL", k)
					}
					if dump[0] != dump[1] {
						t.Fatalf("step %d: the branch left %q, the general path %q", step, dump[0], dump[1])
					}
					// The two calls ran a moment apart and PTTL counts down in real time.
					a, _ := strconv.ParseInt(ttl[0], 10, 64)
					b, _ := strconv.ParseInt(ttl[1], 10, 64)
					if (a < 0) != (b < 0) || b-a > 1000 || a-b > 1000 {
						t.Fatalf("step %d: PTTL %d after the branch, %d after the general path", step, a, b)
					}
					now += int64(rng.IntN(300_000))
				}
			})
		}
	}
}
