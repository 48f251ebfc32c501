package redisstore

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// loadRun decides continuously from 16 goroutines until stop is closed and records when
// each failed decision started.
type loadRun struct {
	mu       sync.Mutex
	failures [][2]time.Time // start and end of each failed decision
	lastErr  error
	ok       int
	wg       sync.WaitGroup
}

func startLoad(s *Store, stop <-chan struct{}) *loadRun {
	r := &loadRun{}
	limit := sluice.Limit{Rate: 1000, Period: time.Second}
	for g := 0; g < 16; g++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := s.AllowN(ctx, fmt.Sprintf("load:%d:%d", g, i%50), limit.With(store.Algorithms()[i%6]), 1)
				cancel()
				r.mu.Lock()
				if err != nil {
					r.failures = append(r.failures, [2]time.Time{start, time.Now()})
					r.lastErr = err
				} else {
					r.ok++
				}
				r.mu.Unlock()
			}
		}()
	}
	return r
}

func (r *loadRun) waitOK(t *testing.T, n int) {
	t.Helper()
	r.mu.Lock()
	target := r.ok + n
	r.mu.Unlock()
	poll.Until(t, 10*time.Second, fmt.Sprintf("%d more decisions of the load", n), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.ok >= target
	})
}

// TestScriptFlushUnderLoad: SCRIPT FLUSH in the middle of a load run causes no failed
// decision; NOSCRIPT is healed invisibly.
func TestScriptFlushUnderLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL())
	stop := make(chan struct{})
	load := startLoad(s, stop)
	load.waitOK(t, 300)
	for i := 0; i < 3; i++ {
		srv.MustDo("SCRIPT", "FLUSH")
		load.waitOK(t, 300)
	}
	close(stop)
	load.wg.Wait()
	if len(load.failures) > 0 {
		t.Errorf("%d decisions failed around SCRIPT FLUSH; last: %v", len(load.failures), load.lastErr)
	}
	if s.noscript.Load() == 0 {
		t.Error("no NOSCRIPT was seen: the flush did not hit the load")
	}
}

// TestServerRestartUnderLoad: killing and restarting redis-server fails only decisions
// in flight or made while it was down; every decision started after it is back succeeds, with the
// script reloaded transparently.
func TestServerRestartUnderLoad(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL())
	stop := make(chan struct{})
	load := startLoad(s, stop)
	load.waitOK(t, 300)

	killed := time.Now()
	srv.Kill()
	time.Sleep(100 * time.Millisecond) // real fault: Redis stays down this long under load
	srv.Restart()
	ready := time.Now()
	load.waitOK(t, 1000)
	close(stop)
	load.wg.Wait()

	during := 0
	const stamp = "15:04:05.000000"
	for _, f := range load.failures {
		if f[1].Before(killed) || f[0].After(ready) {
			t.Errorf("a decision made in [%v, %v] failed outside the restart [%v, %v]",
				f[0].Format(stamp), f[1].Format(stamp), killed.Format(stamp), ready.Format(stamp))
		} else {
			during++
		}
	}
	t.Logf("%d decisions failed during the restart (last error: %v); noscript healed %d", during, load.lastErr, s.noscript.Load())
	if s.noscript.Load() == 0 {
		t.Error("the restarted server had no script, yet no NOSCRIPT was healed")
	}
}

// TestTTL: every key the store writes has a TTL equal to the time until its state is
// empty (the Decision's ResetAfter, rounded up to a millisecond), looks and denials do not
// create or extend keys, and keys are gone once their state is empty. Redis's own clock.
func TestTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL())
	ctx := context.Background()
	pttl := func(key string) time.Duration { return keyTTL(t, srv, key) }
	var maxReset time.Duration
	for _, a := range store.Algorithms() {
		l := sluice.Limit{Algorithm: a, Rate: 3, Period: 1200 * time.Millisecond}
		id := "ttl:" + a.String()
		key := s.Key(id, l)
		// The window algorithms' windows are aligned to multiples of the period since the
		// epoch on Redis's clock (this machine's), whose TTLs are what the test checks, so
		// it stays on that clock: start at least 600 ms before a boundary, so that a slow
		// machine does not carry the decisions below into the next window, where the 4th
		// would be allowed.
		clocktest.AwayFromEdge(t, l.Period, 600*time.Millisecond)
		if d, err := s.AllowN(ctx, id, l, 0); err != nil || !d.Allowed {
			t.Fatalf("%v: look: %+v, %v", a, d, err)
		}
		if srv.MustDo("EXISTS", key) != "0" {
			t.Errorf("%v: a look created the key", a)
		}
		var d sluice.Decision
		for i := 0; i < 3; i++ {
			var err error
			if d, err = s.AllowN(ctx, id, l, 1); err != nil || !d.Allowed {
				t.Fatalf("%v: %+v, %v", a, d, err)
			}
		}
		ttl := pttl(key)
		ceil := (d.ResetAfter + time.Millisecond - 1).Truncate(time.Millisecond)
		if ttl <= 0 || ttl > ceil || ttl < d.ResetAfter-150*time.Millisecond { // the PTTL is read after the decision: scheduling on a loaded machine
			t.Errorf("%v: PTTL %v, want about ResetAfter %v (≤ %v)", a, ttl, d.ResetAfter, ceil)
		}
		if denied, err := s.AllowN(ctx, id, l, 1); err != nil || denied.Allowed {
			t.Fatalf("%v: 4th decision %+v, %v; want denied", a, denied, err)
		}
		if after := pttl(key); after > ttl {
			t.Errorf("%v: a denial extended the TTL from %v to %v", a, ttl, after)
		}
		maxReset = max(maxReset, d.ResetAfter)
	}
	// Redis expires keys on its own clock; the PTTLs above bound each by its ResetAfter.
	poll.UntilDescribed(t, maxReset+5*time.Second, "every key expired once every state is empty",
		func() bool { return srv.MustDo("KEYS", "*") == "" },
		func() string { return "keys left: " + srv.MustDo("KEYS", "*") })

	// A mixed workload, single and multi-limit: every key it leaves has a TTL. The cost,
	// burst, rate and period vary independently of the algorithm (i/6 and on), so every
	// algorithm both spends and looks.
	spent := map[sluice.Algorithm]int{}
	limitOf := func(i int) sluice.Limit {
		return sluice.Limit{Algorithm: store.Algorithms()[i%6], Rate: int64(1 + (i/6)%5),
			Period: time.Duration(1+(i/30)%7) * time.Second, Burst: int64((i / 12) % 3)}
	}
	for i := 0; i < 600; i++ {
		l, n := limitOf(i), int64((i/6)%2)
		id := fmt.Sprintf("mixed:%d", i%40)
		if i%10 == 9 {
			l2 := limitOf(i + 1)
			ds, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: id, Limit: l, N: 1}, {Key: id, Limit: l2, N: 1}})
			if err != nil {
				t.Fatal(err)
			}
			if ds[0].Allowed {
				spent[l.Algorithm]++
				spent[l2.Algorithm]++
			}
			continue
		}
		d, err := s.AllowN(ctx, id, l, n)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed && n > 0 {
			spent[l.Algorithm]++
		}
	}
	for _, a := range store.Algorithms() {
		if spent[a] == 0 {
			t.Errorf("the mixed workload never spent on %v", a)
		}
	}
	keys := strings.Fields(srv.MustDo("KEYS", "*"))
	if len(keys) == 0 {
		t.Fatal("the mixed workload wrote no keys")
	}
	for _, k := range keys {
		// -2ms: the key expired since KEYS; -1ms would be a key without a TTL.
		// A sliding window's state lasts up to two periods (its current and next window).
		if ttl := pttl(k); ttl == -time.Millisecond || ttl > 14*time.Second {
			t.Errorf("%s: PTTL %v, want a TTL within two of the longest period", k, ttl)
		}
	}
}

// keyTTL is key's PTTL on srv: -1ms for a key without a TTL, -2ms for none.
func keyTTL(t *testing.T, srv *redistest.Server, key string) time.Duration {
	t.Helper()
	v, err := strconv.ParseInt(srv.MustDo("PTTL", key), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(v) * time.Millisecond
}

// TestWindowKeepsTTL: a fixed window's or calendar quota's spend that leaves the period's
// end as it was keeps the key's TTL (so one removed by hand, PERSIST, stays removed), and
// sets it again when the period is a new one, when the minimum TTL raises it, or when the
// store decides on a clock of its own (WithClock), whose TTLs run out on Redis's.
func TestWindowKeepsTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := context.Background()
	now := time.Now()
	// A day, in whichever of two zones 12 hours apart is an hour or more from its
	// midnights, so that no step below crosses into the next day.
	day := sluice.Calendar{Unit: sluice.CalendarDay, Zone: mustZone("UTC")}
	if start, end := day.Bounds(now); now.Sub(start) < time.Hour || end.Sub(now) < time.Hour {
		day.Zone = mustZone("Etc/GMT-12")
	}
	window := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: 10 * time.Second}
	for _, l := range []sluice.Limit{window, sluice.PerCalendar(10, day)} {
		t.Run(l.String(), func(t *testing.T) {
			t.Parallel()
			s := open(t, srv.URL())
			pttl := func(key string) time.Duration { return keyTTL(t, srv, key) }
			spend := func(s *Store, id string, remaining int64) {
				t.Helper()
				if d, err := s.AllowN(ctx, id, l, 1); err != nil || !d.Allowed || d.Remaining != remaining {
					t.Fatalf("%s: %+v, %v; want allowed, %d remaining", id, d, err, remaining)
				}
			}
			// spendPersisted spends on id, removes its key's TTL, spends again and
			// returns the TTL then.
			spendPersisted := func(s *Store, id string) time.Duration {
				t.Helper()
				spend(s, id, 9)
				srv.MustDo("PERSIST", s.Key(id, l))
				spend(s, id, 8)
				return pttl(s.Key(id, l))
			}
			// The period now and the one before it, in µs; the fixed window's two spends
			// must not straddle its end.
			var cur, prev, next int64
			if l.Calendar.IsZero() {
				p := l.Period.Microseconds()
				// The store decides on Redis's TIME, which a test cannot set, since the
				// TTLs Redis runs out on that clock are what is tested: start clear of
				// the window's end.
				clocktest.AwayFromEdge(t, l.Period, 3*time.Second)
				cur = time.Now().UnixMicro() / p * p
				prev, next = cur-p, cur+p
			} else {
				start, end := day.Bounds(time.Now())
				before, _ := day.Bounds(start.Add(-time.Second))
				cur, prev, next = start.UnixMicro(), before.UnixMicro(), end.UnixMicro()
			}

			if ttl := spendPersisted(s, "kept"); ttl != -time.Millisecond {
				t.Errorf("second spend in the period: PTTL %v, want the first's removed TTL kept (-1ms)", ttl)
			}
			raised := open(t, srv.URL(), WithMinTTL(48*time.Hour))
			if ttl := spendPersisted(raised, "raised"); ttl < 47*time.Hour {
				t.Errorf("second spend under a 48h minimum: PTTL %v, want it set again to 48h", ttl)
			}
			own := open(t, srv.URL(), WithClock(time.Now))
			if ttl := spendPersisted(own, "own"); ttl <= 0 {
				t.Errorf("second spend on the store's own clock: PTTL %v, want it set again", ttl)
			}

			// A state written by hand, without a TTL: 3 units of the current period are
			// kept on (its TTL too), 3 of the previous one are replaced by a new period's,
			// with its TTL.
			state := func(a int64) string {
				b := appendFloat(appendFloat(nil, a), 3)
				if !l.Calendar.IsZero() { // a calendar state's third field: its period's end
					end := next
					if a == prev {
						end = cur
					}
					b = appendFloat(b, end)
				}
				return string(b)
			}
			srv.MustDo("SET", s.Key("current", l), state(cur))
			spend(s, "current", 6)
			if ttl := pttl(s.Key("current", l)); ttl != -time.Millisecond {
				t.Errorf("spend on the current period's state: PTTL %v, want none kept (-1ms)", ttl)
			}
			srv.MustDo("SET", s.Key("previous", l), state(prev))
			spend(s, "previous", 9)
			left := time.Duration(next-time.Now().UnixMicro()) * time.Microsecond
			if ttl := pttl(s.Key("previous", l)); ttl <= 0 || ttl > left+time.Second {
				t.Errorf("spend on the previous period's state: PTTL %v, want the new period's %v", ttl, left)
			}
		})
	}
}

// TestForeignStateReadsAsEmpty: a key holding what this store never writes (decimal
// text from an older encoding, a value of the wrong size, NaN, a negative or fractional
// field, a value of another type) decides as an empty state, and the decision replaces it
// with a real one: alone in a call (read with GET) and beside another request (MGET). A
// look (cost 0) before it leaves a value of another type as it is, in both calls.
func TestForeignStateReadsAsEmpty(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL())
	ctx := context.Background()
	f64 := func(xs ...float64) string {
		var b []byte
		for _, x := range xs {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return string(b)
	}
	values := map[string]string{
		"text16":   "1732912345678901",
		"text8":    "12345678",
		"short":    "abc",
		"nan":      f64(math.NaN(), 5),
		"negative": f64(-1e15, 7),
		"fraction": f64(1.5e15+0.5, 3),
		"huge":     f64(1e300, 1e300),
		"nan3":     f64(1e15, 0, math.NaN()), // three fields, the third not an integer
	}
	writes := map[string]func(key string){}
	for name, v := range values {
		writes[name] = func(key string) { srv.MustDo("SET", key, v, "PX", "60000") }
	}
	// Values of another type, named as TYPE names them.
	writes["list"] = func(key string) { srv.MustDo("RPUSH", key, "a") }
	writes["hash"] = func(key string) { srv.MustDo("HSET", key, "a", "1") }
	writes["zset"] = func(key string) { srv.MustDo("ZADD", key, "1", "a") }
	for _, a := range store.Algorithms() {
		if a == sluice.SlidingLog {
			continue // a sorted set, not a string
		}
		l := sluice.Limit{Algorithm: a, Rate: 5, Period: time.Minute}
		for _, alone := range []bool{true, false} {
			// decide asks for n units on id, alone in a call or beside another request.
			decide := func(id string, n int64) (sluice.Decision, error) {
				if alone {
					return s.AllowN(ctx, id, l, n)
				}
				ds, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: id, Limit: l, N: n}, {Key: id + ":other", Limit: l, N: n}})
				if err != nil {
					return sluice.Decision{}, err
				}
				return ds[0], nil
			}
			for name, write := range writes {
				id := fmt.Sprintf("foreign:%s:%v", name, alone)
				key := s.Key(id, l)
				write(key)
				if _, isString := values[name]; !isString && a != sluice.Concurrency {
					if d, err := decide(id, 0); err != nil || !d.Allowed || d.Remaining != 5 {
						t.Errorf("%v, %s, alone %v: look %+v, %v; want allowed with 5 remaining, as on an empty state", a, name, alone, d, err)
					}
					if got := srv.MustDo("TYPE", key); got != name {
						t.Errorf("%v, alone %v: after a look the key is a %s, want the %s it was", a, alone, got, name)
					}
				}
				if d, err := decide(id, 1); err != nil || !d.Allowed || d.Remaining != 4 {
					t.Errorf("%v, %s, alone %v: %+v, %v; want allowed with 4 remaining, as on an empty state", a, name, alone, d, err)
				}
				if d2, err := s.AllowN(ctx, id, l, 1); err != nil || !d2.Allowed || d2.Remaining != 3 {
					t.Errorf("%v, %s, alone %v: second decision %+v, %v; want 3 remaining (the state was replaced)", a, name, alone, d2, err)
				}
			}
		}
	}
}

// TestCancelledCallsKeepKeysIntact: script calls are built in buffers that are reused from
// call to call, which is safe only once a call has been answered. Under load, with
// deadlines so short that many calls are cancelled (some while still queued to be
// written), every key Redis ends up holding must be one the store was asked to decide
// on, and the decisions that completed must have been counted on their own keys.
func TestCancelledCallsKeepKeysIntact(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := open(t, srv.URL(), WithMinTTL(time.Hour))
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 1_000_000, Period: time.Hour}
	const goroutines, perG = 32, 300
	want := map[string]bool{}
	for g := 0; g < goroutines; g++ {
		for i := 0; i < perG; i++ {
			want[s.Key(fmt.Sprintf("cancel:%d:%d", g, i%7), limit)] = true
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := map[string]int64{} // completed, allowed decisions per identity
	var errsN atomic.Int64     // decisions that ran out of time
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perG; i++ {
				id := fmt.Sprintf("cancel:%d:%d", g, i%7)
				// Deadlines from 20 µs to 2 ms: a call whose every decision's deadline
				// passes is cancelled inside rueidis, queued or in flight.
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(20+(g*perG+i)*7919%1980)*time.Microsecond)
				d, err := s.AllowN(ctx, id, limit, 1)
				cancel()
				if err != nil {
					errsN.Add(1)
				}
				if err == nil && d.Allowed {
					mu.Lock()
					done[id]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if errsN.Load() == 0 {
		t.Fatal("no decision ran out of time: the test did not exercise cancelled calls")
	}
	time.Sleep(50 * time.Millisecond) // real fault: calls abandoned at their deadline may still be on the wire and land
	keys := strings.Fields(srv.MustDo("KEYS", "*"))
	if len(keys) == 0 {
		t.Fatal("no keys written")
	}
	for _, k := range keys {
		if !want[k] {
			t.Errorf("Redis holds key %q, which no decision named", k)
		}
	}
	// A fixed window's count is the units spent in the window: at least every completed
	// admission (abandoned calls may have spent too), and no more than were attempted.
	for id, n := range done {
		d, err := s.AllowN(context.Background(), id, limit, 0)
		if err != nil {
			t.Fatal(err)
		}
		if c := limit.Rate - d.Remaining; c < n || c > perG {
			t.Errorf("%s: %d units counted, %d admissions completed (at most %d attempted)", id, c, n, perG)
		}
	}
}

// TestStoreSideCancellation: rueidis dials a missing connection once for every command
// waiting on it, under the context of the command that asked first, and when that context
// ends every command waiting gets its cancellation. A decision or a PING whose own
// context is live must then get a store failure (store.KindRefused), never an error that
// reads as its caller's cancellation: a failover decorator would pass that to the caller
// instead of applying its failure mode.
func TestStoreSideCancellation(t *testing.T) {
	t.Parallel()
	// An accept queue of one, so that once the paused server's queue is full a dial
	// hangs in connect until its context ends. hz 10 makes the store log its hz hint,
	// the last word of its start-up checks.
	srv := redistest.Start(t, redistest.WithConfig("tcp-backlog", "1"), redistest.WithConfig("hz", "10"))
	dials := make(chan struct{}, 64)
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{srv.Addr()},
		DisableCache:      true,
		PipelineMultiplex: -1, // one connection: every command waits on its dial
		DialCtxFn: func(ctx context.Context, dst string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
			select {
			case dials <- struct{}{}:
			default:
			}
			return d.DialContext(ctx, "tcp", dst)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var logs syncBuffer
	s, err := New(client, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	limit := sluice.PerSecond(1000)
	if _, err := s.AllowN(context.Background(), "warm", limit, 1); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the store's start-up checks", func() bool { return strings.Contains(logs.String(), "hz 100 lowers") })

	// Lose the connection: once a decision's dial is refused, the next one dials anew.
	srv.Kill()
	poll.Until(t, 10*time.Second, "a refused dial", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := s.AllowN(ctx, "down", limit, 1)
		return sluice.KindOf(err) == store.KindRefused
	})
	srv.Restart()
	srv.Pause()
	var queued []net.Conn // connections the paused server has not accepted
	defer func() {
		for _, c := range queued {
			c.Close()
		}
	}()
	for {
		c, err := net.DialTimeout("tcp", srv.Addr(), 200*time.Millisecond)
		if err != nil {
			if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
				t.Fatalf("filling the accept queue: %v", err)
			}
			break // full: a dial now hangs
		}
		if queued = append(queued, c); len(queued) > 32 {
			t.Fatal("the paused server's accept queue never filled")
		}
	}
	for len(dials) > 0 {
		<-dials
	}

	// A's decision dials, under a batch context that ends at A's deadline.
	ctxA, cancelA := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelA()
	errA := make(chan error, 1)
	go func() {
		_, err := s.AllowN(ctxA, "a", limit, 1)
		errA <- err
	}()
	select {
	case <-dials:
	case <-time.After(10 * time.Second):
		t.Fatal("A's decision did not dial")
	}
	// B's decision and a PING, with live contexts, wait on A's dial.
	ctxB, cancelB := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelB()
	errB, errPing := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := s.AllowN(ctxB, "b", limit, 1)
		errB <- err
	}()
	go func() { errPing <- s.Ping(ctxB) }()

	if err := <-errA; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("A, past its own deadline: %v, want context.DeadlineExceeded", err)
	}
	for name, ch := range map[string]chan error{"B's decision": errB, "PING": errPing} {
		err := <-ch
		if ctxB.Err() != nil {
			t.Fatalf("%s: its own context ended (%v): it did not share A's dial", name, err)
		}
		if errors.Is(err, context.Canceled) || sluice.KindOf(err) != store.KindRefused {
			t.Errorf("%s, its context live, after A's dial was abandoned: %v of kind %q; want a store failure of kind %q",
				name, err, sluice.KindOf(err), store.KindRefused)
		}
	}
	if n := len(dials); n > 0 {
		t.Errorf("%d dials besides A's: B or PING did not wait on A's", n)
	}
}
