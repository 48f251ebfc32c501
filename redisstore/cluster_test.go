package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/hashslot"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

func clusterURL(c *redistest.Cluster) string {
	addrs := c.Addrs()
	return "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
}

// hostileIdentities are identities that try to break the key layout.
var hostileIdentities = []string{
	"{", "}", "{}", "}{", "{{}}", "a{b}c", "{user}:1", "user:1", "user}:1", ":", "::", "a:b",
	"%", "%7D", "%257D", "%7B%7D", "\x00", "a\x00b", "\xff\xfe\xfd", "é{", strings.Repeat("}", store.MaxKeyLen),
	strings.Repeat("{", store.MaxKeyLen), strings.Repeat("x", store.MaxKeyLen-1) + "}",
}

// TestHostileIdentities: identities with '{', '}', ':', '%', NUL, invalid UTF-8 and 64 KiB
// never collide, and all keys of one identity share the slot of its hash tag.
func TestHostileIdentities(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clock := newTestClock()
	s := open(t, srv.URL(), WithClock(clock.Now), WithMinTTL(time.Hour))
	// Standalone Redis has no CLUSTER KEYSLOT; redistest's tests hold redistest.Slot to it.
	checkHostile(t, s, clock, func(key string) string { return fmt.Sprint(redistest.Slot(key)) })
}

func checkHostile(t *testing.T, s *Store, clock *clocktest.Clock, keyslot func(string) string) {
	t.Helper()
	ctx := context.Background()
	once := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1, Period: time.Hour}
	other := sluice.Limit{Algorithm: sluice.GCRA, Rate: 1, Period: time.Hour}
	// Every identity's first decision is admitted: had two identities shared a key, the
	// second would be denied.
	for round, want := range []bool{true, false} {
		for i, id := range hostileIdentities {
			d, err := s.AllowN(ctx, id, once, 1)
			if err != nil {
				t.Fatalf("identity %d: %v", i, err)
			}
			if d.Allowed != want {
				t.Errorf("round %d, identity %d (%.20q): allowed %v, want %v", round, i, id, d.Allowed, want)
			}
			// Several limits of one identity in one atomic call: one slot.
			if _, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: id, Limit: other, N: 0}, {Key: id, Limit: once, N: 0}}); err != nil {
				t.Errorf("identity %d: multi-limit: %v", i, err)
			}
		}
	}
	for i, id := range hostileIdentities {
		k1, k2 := s.Key(id, once), s.Key(id, other)
		tag := "{" + escapeIdentity(id) + "}"
		want := fmt.Sprint(slot(tag))
		if got := keyslot(k1); got != want {
			t.Errorf("identity %d: key slot %s, want the slot of its hash tag %s", i, got, want)
		}
		if got := keyslot(k2); got != want {
			t.Errorf("identity %d: second limit's key slot %s, want %s", i, got, want)
		}
		// The store routes a decision by idSlot, without building the key.
		if got := fmt.Sprint(idSlot(id)); got != want {
			t.Errorf("identity %d: idSlot %s, want the key's slot %s", i, got, want)
		}
	}
}

// TestCluster: on a 3-primary cluster every algorithm decides as the memory store does,
// multi-limit calls on one identity are atomic, a multi-limit call across slots that is
// denied spends nothing, and every key of an identity lives on the node serving its slot.
func TestCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	clock := newTestClock()
	s := open(t, clusterURL(c), WithClock(clock.Now), WithMinTTL(time.Hour))
	if !s.conn.Load().cluster {
		t.Fatal("store did not detect cluster mode")
	}
	mem := memory.New(memory.WithClock(clock.Now), memory.WithSweepInterval(0))
	defer mem.Close()
	ctx := context.Background()

	ids := make([]string, 30)
	for i := range ids {
		ids[i] = fmt.Sprintf("user:%d", i)
	}
	for _, a := range store.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			l := sluice.Limit{Algorithm: a, Rate: 3, Period: time.Second}
			for step := 0; step < 6; step++ {
				clock.Advance(97 * time.Millisecond)
				for _, id := range ids {
					want, _ := mem.AllowN(ctx, id, l, 1)
					got, err := s.AllowN(ctx, id, l, 1)
					if err != nil {
						t.Fatalf("%s: %v", id, err)
					}
					if got != want {
						t.Fatalf("%s step %d: redis %+v, memory %+v", id, step, got, want)
					}
				}
			}
		})
	}

	t.Run("calendar across slots", func(t *testing.T) {
		// Two identities in different slots: one's quota denies, so the other's spend is
		// refunded (refund_calendar_window), as memory spends nothing.
		month := sluice.PerCalendar(3, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: mustZone("Europe/Berlin"), Anchor: 31})
		day := sluice.PerCalendar(2, sluice.Calendar{Unit: sluice.CalendarDay, Zone: mustZone("America/New_York")})
		for i := 0; i < 10; i++ {
			clock.Advance(5 * time.Hour)
			reqs := []sluice.Request{{Key: "org:1", Limit: month, N: 1}, {Key: "user:2", Limit: day, N: 1}}
			want, _ := sluice.AllowMulti(ctx, mem, reqs)
			got, err := sluice.AllowMulti(ctx, s, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("step %d request %d: redis %+v, memory %+v", i, j, got[j], want[j])
				}
			}
		}
	})

	t.Run("multi", func(t *testing.T) {
		perSec := sluice.Limit{Algorithm: sluice.TokenBucket, Rate: 2, Period: time.Second}
		perHour := sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 5, Period: time.Hour}
		perMin := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 4, Period: time.Minute}
		for i := 0; i < 8; i++ {
			clock.Advance(400 * time.Millisecond)
			reqs := []sluice.Request{{Key: "api:7", Limit: perSec, N: 1}, {Key: "api:7", Limit: perHour, N: 1}, {Key: "api:7", Limit: perMin, N: 1}}
			want, _ := sluice.AllowMulti(ctx, mem, reqs)
			got, err := sluice.AllowMulti(ctx, s, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("batch %d request %d: redis %+v, memory %+v", i, j, got[j], want[j])
				}
			}
		}
		// Keys of one identity: one slot, on the node serving it.
		for _, l := range []sluice.Limit{perSec, perHour, perMin} {
			k := s.Key("api:7", l)
			owner := c.NodeForKey(k)
			if owner.MustDo("EXISTS", k) != "1" {
				t.Errorf("%s not on the node serving its slot", k)
			}
		}

		// Two identities in different slots: decided all or nothing across the slots. The
		// second identity's hourly log is exhausted, so the batch is denied and the first
		// identity's limit keeps what it had.
		a, b := "user:0", ""
		for _, id := range ids {
			if slot(s.Key(id, perSec)) != slot(s.Key(a, perSec)) {
				b = id
				break
			}
		}
		for i := 0; i < 5; i++ {
			if _, err := s.AllowN(ctx, b, perHour, 1); err != nil {
				t.Fatal(err)
			}
		}
		before, _ := s.AllowN(ctx, a, perHour, 0)
		ds, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: a, Limit: perHour, N: 1}, {Key: b, Limit: perHour, N: 1}})
		if err != nil {
			t.Fatalf("cross-slot multi: %v", err)
		}
		if ds[0].Allowed || ds[1].Allowed || ds[0].RetryAfter != 0 || ds[1].RetryAfter == 0 || ds[0].Remaining != before.Remaining {
			t.Errorf("cross-slot multi denied by its second request: %+v", ds)
		}
		if after, _ := s.AllowN(ctx, a, perHour, 0); after != before {
			t.Errorf("denied multi spent: before %+v, after %+v", before, after)
		}
	})

	t.Run("hostile", func(t *testing.T) {
		checkHostile(t, s, clock, func(key string) string { return c.Nodes[0].MustDo("CLUSTER", "KEYSLOT", key) })
	})
}

// slot is the Redis Cluster hash slot of a key, found as Redis finds it: CRC16 (XMODEM) of
// the hash tag, mod 16384. The tests hold idSlot, which the store routes by, to it.
func slot(key string) uint16 { return hashslot.Of(key) }

// TestClusterUnderLoad: on the 3-primary cluster, concurrent decisions are coalesced per
// slot (ten identities share one slot, the rest are spread), every identity admits exactly
// its allowance, never more, and SCRIPT FLUSH on every primary in the middle of the load
// fails no decision.
func TestClusterUnderLoad(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	s := open(t, clusterURL(c))
	ctx := context.Background()
	const allowance = 40
	// One unit a day per unit of allowance: nothing refills during the test.
	limits := []sluice.Limit{
		{Algorithm: sluice.GCRA, Rate: allowance, Period: 24 * time.Hour * allowance},
		{Algorithm: sluice.TokenBucket, Rate: allowance, Period: 24 * time.Hour * allowance},
		{Algorithm: sluice.SlidingLog, Rate: allowance, Period: 24 * time.Hour},
	}
	// Ten identities in the slot of "shared:0", and ten spread by their names.
	var ids []string
	want := slot(s.Key("shared:0", limits[0]))
	for i := 0; len(ids) < 10; i++ {
		if id := fmt.Sprint("shared:", i); slot(s.Key(id, limits[0])) == want {
			ids = append(ids, id)
		}
	}
	for i := 0; i < 10; i++ {
		ids = append(ids, fmt.Sprint("spread:", i))
	}
	owner := c.NodeForKey(s.Key(ids[0], limits[0]))
	onOwner := make([]bool, len(ids))
	for i, id := range ids {
		onOwner[i] = c.NodeForKey(s.Key(id, limits[0])) == owner
	}
	owner.MustDo("CONFIG", "RESETSTAT")
	var sentToOwner atomic.Int64
	admitted := make([]atomic.Int64, len(ids)*len(limits))
	var failed atomic.Int64
	var lastErr atomic.Value
	var wg sync.WaitGroup
	run := func(rounds int) {
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < rounds; i++ {
					k := (g*7 + i) % len(admitted)
					if onOwner[k%len(ids)] {
						sentToOwner.Add(1)
					}
					d, err := s.AllowN(ctx, ids[k%len(ids)], limits[k/len(ids)], 1)
					if err != nil {
						failed.Add(1)
						lastErr.Store(err)
						continue
					}
					if d.Allowed {
						admitted[k].Add(1)
					}
				}
			}(g)
		}
	}
	run(40)
	for _, n := range c.Nodes {
		n.MustDo("SCRIPT", "FLUSH")
	}
	run(40)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d decisions failed under load with SCRIPT FLUSH; last: %v", n, lastErr.Load())
	}
	if s.noscript.Load() == 0 {
		t.Error("no NOSCRIPT was healed: the flush did not hit the load")
	}
	// Coalescing per slot: the node holding the shared slot got far fewer script calls
	// than decisions (ten of its identities share one slot, so their decisions share calls).
	if calls, _ := owner.ScriptStats(); calls*2 > sentToOwner.Load() {
		t.Errorf("the shared slot's node ran %d script calls for %d decisions: not coalesced", calls, sentToOwner.Load())
	}
	// 64 goroutines × 80 attempts over 60 (identity, limit) pairs: 85 attempts each.
	for k := range admitted {
		if got := admitted[k].Load(); got != allowance {
			t.Errorf("%s under %v: %d admitted, want exactly %d", ids[k%len(ids)], limits[k/len(ids)], got, allowance)
		}
	}
}

// TestClusterACL: on a cluster, a user allowed only sluice's keys (~sluice:*) is enough:
// the store connects with its credentials in the cluster URL form and decides on every
// primary, multi-limit calls included; a wrong password is refused.
func TestClusterACL(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	for _, n := range c.Nodes {
		n.MustDo("ACL", "SETUSER", "limiter", "on", ">s3cret", "~sluice:*", "+@all")
	}
	addrs := c.Addrs()
	withUser := "redis://limiter:s3cret@" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	s := open(t, withUser)
	ctx := context.Background()
	for i := 0; i < 20; i++ { // identities spread over the three primaries
		if d, err := s.AllowN(ctx, fmt.Sprint("acl:", i), sluice.PerSecond(5), 1); err != nil || !d.Allowed {
			t.Fatalf("identity %d: %+v %v", i, d, err)
		}
	}
	if ds, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: "acl:x", Limit: sluice.PerSecond(5), N: 1}, {Key: "acl:x", Limit: sluice.PerHour(50), N: 1}}); err != nil || !ds[0].Allowed {
		t.Fatalf("multi-limit call: %+v %v", ds, err)
	}
	bad, err := Open("redis://limiter:wrong@" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr="))
	if err == nil {
		_, err = bad.AllowN(ctx, "acl:0", sluice.PerSecond(5), 1)
		bad.Close()
	}
	if err == nil {
		t.Error("a wrong password decided on the cluster")
	}
}
