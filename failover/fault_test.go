package failover

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/store"
)

// The fault tests run a failover.Limiter with its defaults (5ms deadline, breaker opening
// after 5 consecutive failures over 50ms or half of 20 calls, 1s open, 3 probes; under
// the race detector the deadline is faultDeadline) in front of a real
// redis-server, under continuous load from loadGoroutines goroutines split between the
// three modes, and hurt the server the ways production servers get hurt.
//
// The figures in bench/README.md, "Failover under faults", come from this test:
//
//	go test ./failover -run TestFaults -count=1 -v
const (
	loadGoroutines = 36 // a multiple of 3: one third per mode
	loadKeys       = 16 // keys per goroutine
	testShare      = 0.5
	healthyBefore  = 600 * time.Millisecond
	healthyAfter   = 600 * time.Millisecond
	recoverWithin  = 10 * time.Second
	// settle is the start of a fault during which the breaker may still be closed: the
	// share of decisions made by a failure mode is judged after it.
	settle = 150 * time.Millisecond
	// minJudged is the least number of decisions of each mode, started after settle,
	// that a fault is judged on: it holds past its hold until they have been made, so
	// that a process descheduled through the fault's span still has it judged on enough
	// decisions. holdCap bounds that wait.
	minJudged = 100
	holdCap   = 30 * time.Second
	// recoverySettle is the start of the recovery that the store's decisions after it
	// are not counted in. The load runs on after recovery for at least healthyAfter, and
	// on until the store has made minJudged decisions (within recoverWithin): a busy
	// machine may open the breaker again for a while on a healthy store.
	recoverySettle = 100 * time.Millisecond
)

var loadModes = [3]sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal}

// faultEnv is what a fault can hurt.
type faultEnv struct {
	srv   *redistest.Server
	proxy *faultproxy.Proxy // nil unless the fault needs one
}

type fault struct {
	name  string
	proxy bool // connect through a fault proxy
	// inject starts the fault; heal ends it (and may itself block until the server is
	// healthy again). The fault lasts at least hold, and on until minJudged decisions of
	// each mode were made during it.
	inject func(t *testing.T, e *faultEnv) (heal func())
	hold   time.Duration
	// endsItself marks a fault that ends on its own, heal only waiting for that: to
	// last longer it is injected again once it has ended.
	endsItself bool
	// minFallback is the least share of decisions that must be made by a failure mode
	// while the fault lasts (after settle), showing the fault took hold.
	minFallback float64
}

var faults = []fault{
	{
		name: "sigkill+restart",
		inject: func(t *testing.T, e *faultEnv) func() {
			e.srv.Kill()
			return e.srv.Restart
		},
		hold:        1500 * time.Millisecond,
		minFallback: 0.9,
	},
	{
		name: "sigstop-3s",
		inject: func(t *testing.T, e *faultEnv) func() {
			e.srv.Pause()
			return e.srv.Resume
		},
		hold:        3 * time.Second,
		minFallback: 0.9,
	},
	{
		name:  "latency-50ms",
		proxy: true,
		inject: func(t *testing.T, e *faultEnv) func() {
			e.proxy.SetLatency(50 * time.Millisecond)
			return func() { e.proxy.SetLatency(0) }
		},
		hold:        2 * time.Second,
		minFallback: 0.9,
	},
	{
		name:  "dropped-connections",
		proxy: true,
		inject: func(t *testing.T, e *faultEnv) func() {
			e.proxy.SetRefuse(true)
			e.proxy.Cut()
			return func() { e.proxy.SetRefuse(false) }
		},
		hold:        1500 * time.Millisecond,
		minFallback: 0.9,
	},
	{
		name: "maxmemory-1mb-noeviction",
		inject: func(t *testing.T, e *faultEnv) func() {
			e.srv.MustDo("CONFIG", "SET", "maxmemory-policy", "noeviction")
			e.srv.MustDo("CONFIG", "SET", "maxmemory", "1mb")
			e.srv.MustDo("DEBUG", "POPULATE", "30000", "filler", "16")
			return func() { e.srv.MustDo("CONFIG", "SET", "maxmemory", "0") }
		},
		hold: 1500 * time.Millisecond,
		// Denials write nothing, so Redis still answers them: only spending decisions
		// fail. The breaker opens all the same.
		minFallback: 0.5,
	},
	{
		name: "debug-sleep-2s",
		inject: func(t *testing.T, e *faultEnv) func() {
			// Written before inject returns, so that the server sleeps from the fault's
			// start however late a goroutine would be scheduled; the reply comes when it
			// wakes.
			c, err := net.DialTimeout("tcp", e.srv.Addr(), 5*time.Second)
			if err != nil {
				t.Fatalf("DEBUG SLEEP: %v", err)
			}
			if _, err := c.Write([]byte("DEBUG SLEEP 2\r\n")); err != nil {
				c.Close()
				t.Fatalf("DEBUG SLEEP: %v", err)
			}
			return func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
				if reply, err := bufio.NewReader(c).ReadString('\n'); err != nil || reply != "+OK\r\n" {
					t.Errorf("DEBUG SLEEP: %q, %v", reply, err)
				}
			}
		},
		endsItself:  true,
		minFallback: 0.9,
	},
}

// sample is one decision of the load.
type sample struct {
	at      time.Duration // start, since the load began
	latency time.Duration
	path    sluice.Path
	mode    sluice.FailureMode
	allowed bool
	bad     string // a contract violation, or ""
}

// figures is one row of the table.
type figures struct {
	name                string
	decisions           int
	p50, p99, max       time.Duration
	share               [4]float64 // by path, during the fault
	toOpen, toRecover   time.Duration
	maxOverall          time.Duration
	storeAfterRecovered float64
}

func TestFaults(t *testing.T) {
	var rows []figures
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) { rows = append(rows, runFault(t, f)) })
	}
	var b strings.Builder
	b.WriteString("\n| fault | decisions | p50 | p99 | max | store | open | closed | local | breaker opened after | recovered after |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %.0f%% | %.0f%% | %.0f%% | %.0f%% | %s | %s |\n",
			r.name, r.decisions, ms(r.p50), ms(r.p99), ms(r.max),
			100*r.share[sluice.PathStore], 100*r.share[sluice.PathOpen], 100*r.share[sluice.PathClosed], 100*r.share[sluice.PathLocal],
			ms(r.toOpen), ms(r.toRecover))
	}
	t.Log(b.String())
}

// TestFaultsInline repeats the frozen server with WithInlineCalls: the Redis store
// returns when its context ends, so decisions keep their deadline without a goroutine per
// call.
func TestFaultsInline(t *testing.T) {
	for _, f := range faults {
		if f.name == "sigstop-3s" {
			t.Run(f.name, func(t *testing.T) { runFault(t, f, WithInlineCalls()) })
		}
	}
}

// alreadyOpen marks a breaker that was not closed when the fault began (it had opened
// on a healthy store that missed deadlines on a busy machine), so the time to open it
// was not measured.
const alreadyOpen = -2

func ms(d time.Duration) string {
	switch {
	case d == alreadyOpen:
		return "(not closed at start)"
	case d < 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

type transition struct {
	at       time.Time
	from, to sluice.BreakerState
}

func runFault(t *testing.T, f fault, opts ...Option) figures {
	e := &faultEnv{srv: redistest.Start(t)}
	url := e.srv.URL()
	if f.proxy {
		e.proxy = faultproxy.Start(t, e.srv.Addr())
		url = "redis://" + e.proxy.Addr()
	}
	backend, err := redisstore.Open(url)
	if err != nil {
		t.Fatalf("redisstore.Open(%s): %v", url, err)
	}
	t.Cleanup(func() { backend.Close() })

	// The script is loaded in the background: wait until the store decides. Then warm
	// up every connection the client will use (it dials lazily, per slot, within the
	// first caller's deadline) by deciding each load key once, concurrently and without
	// a tight deadline. Only then does the failover.Limiter start.
	poll.Until(t, 5*time.Second, "a first store decision", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := backend.AllowN(ctx, "warmup", sluice.PerSecond(1000), 1)
		return err == nil
	})
	var warm sync.WaitGroup
	for g := 0; g < loadGoroutines; g++ {
		warm.Add(1)
		go func() {
			defer warm.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			limit := sluice.Limit{Algorithm: store.Algorithms()[g%6], Rate: 400, Period: time.Second}
			for i := 0; i < loadKeys; i++ {
				if _, err := backend.AllowN(ctx, fmt.Sprintf("%s-load-%d-%d", f.name, g, i), limit, 1); err != nil {
					t.Errorf("warm-up: %v", err)
					return
				}
			}
		}()
	}
	warm.Wait()

	var tmu sync.Mutex
	var transitions []transition
	local := memory.New()
	t.Cleanup(func() { local.Close() })
	lim := New(backend, append([]Option{WithDeadline(testFaultDeadline(t)), WithLocalLimiter(local), WithStateChange(func(from, to sluice.BreakerState) {
		tmu.Lock()
		transitions = append(transitions, transition{time.Now(), from, to})
		tmu.Unlock()
	})}, opts...)...)
	t.Cleanup(func() { lim.Close() })
	deadline := lim.Deadline()

	// The load, and a record of when the process did not run.
	stalls := startStallMonitor(t)
	begin := time.Now()
	var stop atomic.Bool
	// judgedFrom is when, since begin, decisions start to count towards minJudged (none
	// before the fault is injected); enough is closed once every mode has minJudged.
	var judgedFrom atomic.Int64
	judgedFrom.Store(math.MaxInt64)
	var judged [len(loadModes)]atomic.Int64
	var modesJudged atomic.Int32
	enough := make(chan struct{})
	// storeFrom is when, since begin, the store's decisions start to count towards
	// storeBack, closed at minJudged of them.
	var storeFrom, storeDecided atomic.Int64
	storeFrom.Store(math.MaxInt64)
	storeBack := make(chan struct{})
	var wg sync.WaitGroup
	results := make([][]sample, loadGoroutines)
	for g := 0; g < loadGoroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mode := loadModes[g%3]
			ctx := context.Background()
			failure := sluice.Failure{Mode: mode, Share: testShare}
			limit := sluice.Limit{Algorithm: store.Algorithms()[g%6], Rate: 400, Period: time.Second}
			local := shareOf(limit, testShare)
			keys := make([]string, loadKeys)
			for i := range keys {
				keys[i] = fmt.Sprintf("%s-load-%d-%d", f.name, g, i)
			}
			for i := 0; !stop.Load(); i++ {
				start := time.Now()
				d, _, err := decideOne(ctx, lim, sluice.Request{Key: keys[i%loadKeys], Limit: limit, N: 1, Failure: failure})
				lat := time.Since(start)
				s := sample{at: start.Sub(begin), latency: lat, path: d.Path, mode: mode, allowed: d.Allowed}
				s.bad = check(d, err, mode, limit, local)
				results[g] = append(results[g], s)
				if int64(s.at) >= judgedFrom.Load() && judged[g%3].Add(1) == minJudged && modesJudged.Add(1) == int32(len(loadModes)) {
					close(enough)
				}
				if s.path == sluice.PathStore && int64(s.at) > storeFrom.Load() && storeDecided.Add(1) == minJudged {
					close(storeBack)
				}
				time.Sleep(loadPause) // real-fault test: a steady load paced in real time
			}
		}()
	}
	// A test that ends early stops the load before the limiter closes.
	t.Cleanup(func() {
		stop.Store(true)
		wg.Wait()
	})

	time.Sleep(healthyBefore) // real-fault test: load on the healthy store first, in real time
	injectAt := time.Now()
	tmu.Lock()
	if n := len(transitions); n > 0 {
		t.Logf("the breaker changed state %d times before the fault (the store missed its %v deadline while healthy: a busy machine)", n, deadline)
	}
	tmu.Unlock()
	judgedFrom.Store(int64(injectAt.Add(settle).Sub(begin)))
	heal := f.inject(t, e)
	time.Sleep(f.hold) // real-fault test: the fault lasts at least this long on the real clock
	// Then on until enough decisions were made while it held: a decision counted has
	// returned, so it started before the heal.
	capAt := injectAt.Add(holdCap)
	haveEnough := func() bool {
		select {
		case <-enough:
			return true
		default:
			return false
		}
	}
	reinjected := 0
	if f.endsItself {
		for heal(); !haveEnough() && time.Now().Before(capAt); heal() {
			heal = f.inject(t, e)
			reinjected++
		}
	} else {
		select {
		case <-enough:
		case <-time.After(time.Until(capAt)):
		}
		heal()
	}
	healAt := time.Now()
	t.Logf("fault held %v (injected again %d times), the process stalled %v of it", healAt.Sub(injectAt).Round(time.Millisecond),
		reinjected, stalls.within(injectAt, healAt).Round(time.Millisecond))
	if !haveEnough() {
		stop.Store(true)
		wg.Wait()
		var made [len(loadModes)]int
		for g, r := range results {
			for _, s := range r {
				if s.at >= injectAt.Add(settle).Sub(begin) && s.at < healAt.Sub(begin) {
					made[g%3]++
				}
			}
		}
		t.Fatalf("the fault held %v (the process stalled %v of it), and the decisions by mode %v started after its first %v were %v: want %d of each to judge it",
			healAt.Sub(injectAt).Round(time.Millisecond), stalls.within(injectAt, healAt).Round(time.Millisecond), loadModes, settle,
			made, minJudged)
	}

	// Recovery: the breaker closes again, with no restart of anything on our side.
	var recoveredAt time.Time
	poll.Until(t, recoverWithin, fmt.Sprintf("the breaker to close after the fault (it needs %d store answers in a row within %v)", 3, deadline), func() bool {
		if lim.State() != store.BreakerClosed {
			return false
		}
		tmu.Lock()
		defer tmu.Unlock()
		for _, tr := range slices.Backward(transitions) {
			if tr.to == store.BreakerClosed && tr.at.After(healAt) {
				recoveredAt = tr.at
				return true
			}
		}
		return false
	})
	storeFrom.Store(int64(recoveredAt.Add(recoverySettle).Sub(begin)))
	time.Sleep(healthyAfter) // real-fault test: load on the healed store, in real time
	select {
	case <-storeBack:
	case <-time.After(recoverWithin):
	}
	stop.Store(true)
	wg.Wait()
	stalls.stop()

	// Every decision kept the contract and the deadline: it waited at most the deadline
	// plus slack (750ms: the race detector on two busy cores) while the process ran (the time it was stalled is no wait for the store:
	// a caller the decorator holds leaves the stall monitor running).
	var all []sample
	for _, r := range results {
		all = append(all, r...)
	}
	for i := range all {
		s := &all[i]
		from := begin.Add(s.at)
		if stalled := stalls.within(from, from.Add(s.latency)); s.bad == "" && s.latency-stalled > deadline+slack {
			s.bad = fmt.Sprintf("took %v (%v of it with the process stalled), deadline %v", s.latency, stalled, deadline)
		}
	}
	bad := 0
	for _, s := range all {
		if s.bad != "" {
			if bad < 10 {
				t.Errorf("decision at %v (mode %v): %s", s.at.Round(time.Millisecond), s.mode, s.bad)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d decisions broke the contract", bad, len(all))
	}

	// The breaker opened during the fault and closed after it.
	tmu.Lock()
	trs := slices.Clone(transitions)
	tmu.Unlock()
	var openedAt time.Time
	atInject := store.BreakerClosed
	for _, tr := range trs {
		if tr.at.Before(injectAt) {
			atInject = tr.to
		}
		if tr.to == store.BreakerOpen && !tr.at.Before(injectAt) {
			openedAt = tr.at
			break
		}
	}
	// (Within a second of the heal, as the failures of the fault's last calls may open
	// it, and the time the process was stalled does not count.)
	if openedAt.IsZero() || openedAt.After(healAt.Add(time.Second+stalls.within(injectAt, openedAt))) {
		t.Errorf("the breaker did not open during the fault (transitions %v)", trs)
	}

	// During the fault the failure modes decided; after recovery the store did again.
	rel := func(at time.Time) time.Duration { return at.Sub(begin) }
	var during []sample
	after, afterStore := 0, 0
	for _, s := range all {
		switch {
		case s.at >= rel(injectAt) && s.at < rel(healAt):
			during = append(during, s)
		case !recoveredAt.IsZero() && s.at > rel(recoveredAt.Add(recoverySettle)):
			after++
			if s.path == sluice.PathStore {
				afterStore++
			}
		}
	}
	fig := figures{name: f.name, decisions: len(during), toOpen: -1, toRecover: -1}
	switch {
	case atInject != store.BreakerClosed:
		fig.toOpen = alreadyOpen
	case !openedAt.IsZero():
		fig.toOpen = openedAt.Sub(injectAt)
	}
	if !recoveredAt.IsZero() {
		fig.toRecover = recoveredAt.Sub(healAt)
	}
	if len(during) == 0 {
		t.Fatal("no decisions during the fault")
	}
	lat := make([]time.Duration, len(during))
	settled, fallback := 0, 0
	for i, s := range during {
		lat[i] = s.latency
		fig.share[s.path] += 1 / float64(len(during))
		if s.at >= rel(injectAt.Add(settle)) {
			settled++
			if s.path != sluice.PathStore {
				fallback++
			}
		}
	}
	slices.Sort(lat)
	fig.p50, fig.p99, fig.max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	for _, s := range all {
		fig.maxOverall = max(fig.maxOverall, s.latency)
	}
	if settled > 0 && float64(fallback)/float64(settled) < f.minFallback {
		t.Errorf("only %d of %d decisions during the fault were made by a failure mode, want at least %.0f%%",
			fallback, settled, 100*f.minFallback)
	}
	for _, m := range loadModes {
		if !slices.ContainsFunc(during, func(s sample) bool { return s.path == pathOf(m) }) {
			t.Errorf("no %v decision during the fault", m)
		}
	}
	// After recovery the store decides again. (How many of those decisions it makes
	// depends on the machine: on a busy one a healthy store misses the deadline now and
	// then, and the breaker may open again for a while; the decisions are right either
	// way, as checked above.)
	if afterStore == 0 {
		t.Errorf("no decision of %d after recovery was made by the store", after)
	} else {
		fig.storeAfterRecovered = float64(afterStore) / float64(after)
	}
	for _, tr := range trs {
		t.Logf("transition at %v: %v -> %v", tr.at.Sub(begin).Round(time.Millisecond), tr.from, tr.to)
	}
	t.Logf("inject at %v, heal at %v; the process stalled for %v in all", injectAt.Sub(begin).Round(time.Millisecond),
		healAt.Sub(begin).Round(time.Millisecond), stalls.within(begin, time.Now()).Round(time.Millisecond))
	t.Logf("%d decisions, %d during the fault: p50 %v p99 %v max %v; store %.1f%% open %.1f%% closed %.1f%% local %.1f%%; opened after %v, recovered %v after healing; store share after recovery %.1f%%",
		len(all), len(during), fig.p50, fig.p99, fig.max, 100*fig.share[0], 100*fig.share[1], 100*fig.share[2], 100*fig.share[3],
		fig.toOpen, fig.toRecover, 100*fig.storeAfterRecovered)

	// A fresh key after recovery is decided exactly, by the store. A call the store
	// does not answer in time (a busy machine) fails closed, and its unit may or may not
	// have been spent: the count is then only bounded.
	poll.Until(t, recoverWithin, "the breaker to be closed with the load stopped", func() bool {
		lim.AllowN(context.Background(), "poke", sluice.PerSecond(1000), 1)
		return lim.State() == store.BreakerClosed
	})
	ctx := context.Background()
	closed := sluice.Failure{Mode: sluice.FailClosed}
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 10, Period: time.Hour}
	allowed, denied, unknown := 0, 0, 0
	last := limit.Rate
	for i := 0; i < 15; i++ {
		d, _, err := decideOne(ctx, lim, sluice.Request{Key: f.name + "-after", Limit: limit, N: 1, Failure: closed})
		switch {
		case d.Path == sluice.PathClosed && errors.Is(err, sluice.ErrStoreUnavailable):
			unknown++
		case err != nil || d.Path != sluice.PathStore:
			t.Fatalf("after recovery, call %d: %+v, %v", i, d, err)
		case d.Allowed:
			allowed++
			if d.Remaining >= last {
				t.Errorf("call %d: remaining %d after %d", i, d.Remaining, last)
			}
			last = d.Remaining
		default:
			denied++
			if d.RetryAfter <= 0 || d.Remaining != 0 {
				t.Errorf("call %d: denied with RetryAfter %v, remaining %d", i, d.RetryAfter, d.Remaining)
			}
		}
	}
	if allowed > 10 || allowed+unknown < 10 || (unknown == 0 && allowed != 10) {
		t.Errorf("after recovery %d of 15 allowed (%d denied, %d unanswered) under 10/hour, want 10", allowed, denied, unknown)
	}
	if unknown > 0 {
		t.Logf("after recovery %d of 15 calls missed the deadline", unknown)
	}
	return fig
}

// check returns what is wrong with one decision of the load, or "". (Its latency is
// checked once the load is over, against the stalls of the process.)
func check(d sluice.Decision, err error, mode sluice.FailureMode, limit, local sluice.Limit) string {
	switch d.Path {
	case sluice.PathStore:
		switch {
		case err != nil:
			return fmt.Sprintf("store path with error %v", err)
		case d.Limit != limit:
			return fmt.Sprintf("store decision under %v, want %v", d.Limit, limit)
		case d.Remaining < 0 || d.Remaining > limit.MaxCost():
			return fmt.Sprintf("remaining %d out of range", d.Remaining)
		case d.Allowed != (d.RetryAfter == 0):
			return fmt.Sprintf("allowed %v with RetryAfter %v", d.Allowed, d.RetryAfter)
		}
	case sluice.PathOpen:
		if mode != sluice.FailOpen || !d.Allowed || err != nil {
			return fmt.Sprintf("open decision %+v, %v in mode %v", d, err, mode)
		}
	case sluice.PathClosed:
		if mode != sluice.FailClosed || d.Allowed || !errors.Is(err, sluice.ErrStoreUnavailable) {
			return fmt.Sprintf("closed decision %+v, %v in mode %v", d, err, mode)
		}
	case sluice.PathLocal:
		if mode != sluice.FailLocal || err != nil || d.Limit != local {
			return fmt.Sprintf("local decision %+v, %v in mode %v (share %v)", d, err, mode, local)
		}
	default:
		return fmt.Sprintf("unknown path %v", d.Path)
	}
	return ""
}

// testFaultDeadline is faultDeadline, or SLUICE_FAULT_DEADLINE when set.
func testFaultDeadline(t *testing.T) time.Duration {
	s := os.Getenv("SLUICE_FAULT_DEADLINE")
	if s == "" {
		return faultDeadline
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("SLUICE_FAULT_DEADLINE=%q: want a positive duration such as 5ms", s)
	}
	return d
}

// TestStallMonitor: the fault tests excuse a decision's latency only for the time the
// process was stopped, not for the time a caller was held: a blocked goroutine leaves the
// monitor running, a stopped process (SIGSTOP, as a busy machine deschedules it) does not.
func TestStallMonitor(t *testing.T) {
	m := startStallMonitor(t)
	// A caller held for 300ms, which a busy machine may also stall for any share of it
	// (the process descheduled is a stall the monitor rightly counts): it must not count
	// as stalled throughout, as a monitor that timed the caller would, in one of a few
	// tries.
	var start, held time.Time
	throughout := func() bool { return m.within(start, held) > held.Sub(start)-stallGap }
	for try := 0; try < 5 && (try == 0 || throughout()); try++ {
		start = time.Now()
		time.Sleep(300 * time.Millisecond) // real time: the monitor must tell a held caller from a stopped process
		held = time.Now()
	}
	stopper := exec.Command("sh", "-c", fmt.Sprintf("kill -STOP %d; sleep 0.3; kill -CONT %d", os.Getpid(), os.Getpid()))
	if err := stopper.Run(); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	m.stop()
	if throughout() {
		t.Errorf("a goroutine held for %v counted as %v of stall", held.Sub(start), m.within(start, held))
	}
	if d := m.within(held, end); d < 200*time.Millisecond {
		t.Errorf("a process stopped for 300ms counted as %v of stall", d)
	}
}

// stallGap is the lateness of the stall monitor's wake-up that counts as a stall.
const stallGap = 10 * time.Millisecond

// stallMonitor records the spans during which the test process did not run: a goroutine
// that wakes every millisecond notes each wake-up more than stallGap late. On two cores
// shared with other test binaries, the process is descheduled for hundreds of
// milliseconds now and then, and every decision in flight takes that long more.
type stallMonitor struct {
	mu    sync.Mutex
	spans [][2]time.Time
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func startStallMonitor(t *testing.T) *stallMonitor {
	m := &stallMonitor{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			// A stop that arrives with the first tick after a stall still records it
			// (select picks either at random).
			quit := false
			select {
			case <-m.quit:
				quit = true
			case <-tick.C:
			}
			now := time.Now()
			if now.Sub(last) > stallGap {
				m.mu.Lock()
				m.spans = append(m.spans, [2]time.Time{last, now})
				m.mu.Unlock()
			}
			if quit {
				return
			}
			last = now
		}
	}()
	t.Cleanup(m.stop)
	return m
}

// stop ends the monitor and waits for it.
func (m *stallMonitor) stop() {
	m.once.Do(func() { close(m.quit) })
	<-m.done
}

// within returns how long the process was stalled between from and to.
func (m *stallMonitor) within(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d time.Duration
	for _, sp := range m.spans {
		if lo, hi := later(sp[0], from), earlier(sp[1], to); hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
