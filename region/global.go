package region

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/share"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/store"
)

//go:embed lua/sync.lua
var syncBody string

var syncSHA = func() string { s := sha1.Sum([]byte(syncBody)); return hex.EncodeToString(s[:]) }()

const pool = share.Whole // shares are in parts per million of the limit

// Global is the global mode (see the package doc): a sluice.Limiter that decides every
// request in process, from this node's leased share of each limit, and reconciles with a
// shared Redis in the background. Only bucket limits can be held globally.
type Global struct {
	client   rueidis.Client
	shared   *redisstore.Store
	node     string
	interval time.Duration
	lease    time.Duration
	timeout  time.Duration
	logger   *slog.Logger
	start    time.Time

	mu      sync.Mutex
	entries map[entryKey]*entry

	wake    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	closed  atomic.Bool
	down    atomic.Bool // the last sync failed; failures are logged when this changes

	onAdmit func(at time.Time, n int64) // tests: called under the entry's lock
}

type entryKey struct {
	key   string
	limit sluice.Limit
}

// GlobalOption configures a Global.
type GlobalOption func(*Global) error

// WithNode sets this node's identity in the shared Redis. It must be unique among the nodes
// sharing a limit; the default is the host name, the process id and a random suffix.
func WithNode(id string) GlobalOption {
	return func(g *Global) error {
		if id == "" || len(id) > 200 {
			return fmt.Errorf("region: node id must have 1 to 200 bytes")
		}
		g.node = id
		return nil
	}
}

// WithSyncInterval sets how often the node reconciles with the shared Redis (default
// 100ms): one pipelined round trip per interval, carrying every active limit.
func WithSyncInterval(d time.Duration) GlobalOption {
	return func(g *Global) error {
		g.interval = d
		return nil
	}
}

// WithLease sets how long a node keeps applying its share without a successful sync
// (default 30 sync intervals, at least 3s). After it the node fences itself (applies no
// share, denying) until it reaches the shared Redis again; the shared Redis frees the share
// for other nodes only after 1.5 leases, so a cut node and the others never use it at once.
func WithLease(d time.Duration) GlobalOption {
	return func(g *Global) error {
		g.lease = d
		return nil
	}
}

// WithSyncTimeout bounds each sync round trip (default 1s).
func WithSyncTimeout(d time.Duration) GlobalOption {
	return func(g *Global) error {
		g.timeout = d
		return nil
	}
}

// WithLogger sets the logger for sync failures (default slog.Default()).
func WithLogger(l *slog.Logger) GlobalOption {
	return func(g *Global) error { g.logger = l; return nil }
}

// NewGlobal returns a Global node reconciling through shared, a Redis store on the shared
// Redis (only its client and key layout are used: Key(identity, limit)+":global" holds a
// limit's global state, in the identity's slot). Close stops it; shared stays open.
func NewGlobal(shared *redisstore.Store, opts ...GlobalOption) (*Global, error) {
	g := &Global{
		client:   shared.Client(),
		shared:   shared,
		interval: 100 * time.Millisecond,
		timeout:  time.Second,
		logger:   slog.Default(),
		start:    time.Now(),
		entries:  map[entryKey]*entry{},
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	for _, o := range opts {
		if err := o(g); err != nil {
			return nil, err
		}
	}
	if g.node == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		g.node = host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	}
	g.lease = cmp.Or(g.lease, max(30*g.interval, 3*time.Second))
	switch {
	case g.interval < time.Millisecond:
		return nil, fmt.Errorf("region: sync interval %v below 1ms", g.interval)
	case g.timeout <= 0:
		return nil, fmt.Errorf("region: sync timeout %v must be positive", g.timeout)
	case g.lease < 2*g.interval:
		return nil, fmt.Errorf("region: lease %v must be at least two sync intervals (%v)", g.lease, 2*g.interval)
	}
	go g.loop()
	return g, nil
}

// Node returns this node's identity.
func (g *Global) Node() string { return g.node }

// Close stops the background sync. Decisions after Close return an error wrapping
// sluice.ErrClosed.
func (g *Global) Close() error {
	if g.closed.CompareAndSwap(false, true) {
		close(g.stop)
		<-g.stopped
	}
	return nil
}

// now is the node's monotonic clock in µs.
func (g *Global) now() int64 { return time.Since(g.start).Microseconds() }

// entry is one (identity, Limit) on this node: the bucket machine (algo.GCRA) with this
// node's share of the burst, on a clock (vnow) that advances at the node's share of real
// time, so that the bucket refills at its share of the rate.
type entry struct {
	mu   sync.Mutex
	id   entryKey
	rkey string
	full algo.Params // the whole limit
	p    algo.Params // full with Burst = this node's share of it

	share int64      // ppm applied now
	st    algo.State // the bucket, on the share clock
	// empty: the bucket is empty at vnow whatever its depth (set while there is no share,
	// when the depth is not yet known; st is then unused until a share fills it).
	empty bool
	vnow  int64 // the share clock, µs: Σ real µs · share/pool, at least 1
	vrem  int64 // its remainder, in ppm·µs
	last  int64 // local µs the share clock was last advanced

	demand, admitted int64 // units since the last sync was sent
	sentAt           int64 // local µs the last sync was sent (-1 before the first)
	okAt             int64 // local µs the last successful sync was sent (-1: never)
	failed           bool  // the last sync failed
	seen             int64 // local µs of the last request
	everShared       bool

	global, globalPrev, nodes int64 // from the last sync

	ready     chan struct{} // closed after the first sync attempt
	readyOnce sync.Once
}

// tick advances the share clock to the local time now.
func (e *entry) tick(now int64) {
	if now <= e.last {
		return
	}
	elapsed := now - e.last
	e.last = now
	if e.share == 0 {
		return
	}
	// (elapsed·share + vrem) / pool, in 128 bits; the quotient fits (elapsed < 2^63, share ≤ pool).
	hi, lo := bits.Mul64(uint64(elapsed), uint64(e.share))
	lo, carry := bits.Add64(lo, uint64(e.vrem), 0)
	q, r := bits.Div64(hi+carry, lo, pool)
	e.vnow += int64(q)
	e.vrem = int64(r)
}

// real is the local µs until the share clock has advanced by v µs at the current share:
// ⌈(v·pool - vrem)/share⌉, rounded up so that the bucket has got there.
func (e *entry) real(v int64) time.Duration {
	if v <= 0 || e.share == 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(v), pool) // v·pool may pass 2^64
	lo, borrow := bits.Sub64(lo, uint64(e.vrem), 0)
	hi -= borrow
	lo, carry := bits.Add64(lo, uint64(e.share-1), 0)
	hi += carry
	const never = math.MaxInt64 / uint64(time.Microsecond) // the longest Duration, in µs
	if hi >= uint64(e.share) {
		return time.Duration(never) * time.Microsecond
	}
	q, _ := bits.Div64(hi, lo, uint64(e.share))
	return time.Duration(min(q, never)) * time.Microsecond
}

// decide runs the node's bucket on a cost of n at the local time now, spending when
// allowed and commit is set. ok is false when the bucket cannot allow n whatever the wait
// (no share, or n above this node's depth): only a larger share will do.
func (e *entry) decide(now, n int64, commit bool) (r algo.Result, ok bool) {
	e.tick(now)
	if e.share == 0 {
		return algo.Result{}, false
	}
	if max(n, 1) > e.p.Burst { // algo.GCRA requires n ≤ Burst: report a look
		_, r = algo.GCRA(e.st, e.vnow, e.p, 0)
		r.Allowed, r.RetryAfter = false, 0
		return r, false
	}
	st, r := algo.GCRA(e.st, e.vnow, e.p, n)
	if r.Allowed && n > 0 && commit {
		e.st = st
	}
	return r, true
}

// setShare switches to the share ppm at now. The bucket keeps what it holds, up to the new
// depth, rounded down to a whole µs of refill; a share of 0 empties it, so that no node
// holds credit beyond the share it applies.
func (e *entry) setShare(ppm, now int64) {
	e.tick(now)
	if ppm == e.share {
		return
	}
	credit := int64(-1) // what the bucket holds at vnow, when it carries over
	switch {
	case ppm == 0:
		e.st, e.empty = algo.State{}, true
	case e.share > 0:
		// A bucket full in ResetAfter µs holds Burst·U - ResetAfter·S.
		_, r := algo.GCRA(e.st, e.vnow, e.p, 0)
		credit = max(0, e.p.Burst*e.p.U-r.ResetAfter*e.p.S)
	case e.empty:
		credit = 0
	}
	e.share = ppm
	// ⌊Burst·share/pool⌋, at least one while share > 0: never more than the limit's Burst,
	// so e.full's units (S, U) serve every share.
	e.p.Burst = share.Of(e.full.Burst, ppm)
	if credit >= 0 {
		e.st, e.empty = algo.GCRAHolding(e.vnow, credit, e.p), false
	}
}

// fence drops the share of an entry that has not synced successfully for a lease.
func (g *Global) fence(e *entry, now int64) {
	if e.share > 0 && (e.okAt < 0 || now-e.okAt > g.lease.Microseconds()) {
		e.setShare(0, now)
	}
}

// checkBucket rejects a limit that global mode cannot hold (see Global).
func checkBucket(l sluice.Limit) error {
	switch l.Algorithm {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket:
		return nil
	}
	return fmt.Errorf("%w: region: global mode holds only gcra, token_bucket and leaky_bucket limits, not %v: shares of a window do not add up", sluice.ErrInvalidLimit, l.Algorithm)
}

// entry returns the node's entry for key under limit, made and announced to the sync loop
// (which syncs it at once) if the node had none.
func (g *Global) entry(key string, limit sluice.Limit) *entry {
	k := entryKey{key, limit}
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.entries[k]; ok {
		return e
	}
	now := g.now()
	full := algo.ParamsOf(limit)
	e := &entry{
		id:     k,
		rkey:   g.shared.Key(key, limit) + ":global",
		full:   full,
		p:      full,
		empty:  true, // until a share fills it (docs/regions-and-pacing.md)
		vnow:   1,
		last:   now,
		sentAt: -1,
		okAt:   -1,
		seen:   now,
		ready:  make(chan struct{}),
	}
	e.p.Burst = 0
	g.entries[k] = e
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return e
}

// wait returns once e has had its first sync, or ctx's error.
func (e *entry) wait(ctx context.Context) error {
	select {
	case <-e.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("region: waiting for the first sync: %w", ctx.Err())
	}
}

// decideLocked decides n units of e at now, e.mu held: it reports whether they fit and,
// when they do and commit is set, spends them.
func (g *Global) decideLocked(e *entry, limit sluice.Limit, n, now int64, commit bool) (sluice.Decision, bool) {
	g.fence(e, now)
	e.seen = now
	r, ok := e.decide(now, n, commit)
	if commit {
		e.demand += n
	}
	if r.Allowed && n > 0 && commit {
		e.admitted += n
		if g.onAdmit != nil {
			g.onAdmit(g.start.Add(time.Duration(now)*time.Microsecond), n)
		}
	}
	d := sluice.Decision{Limit: limit, Allowed: r.Allowed, Remaining: r.Remaining,
		ResetAfter: e.real(r.ResetAfter), RetryAfter: e.real(r.RetryAfter)}
	if !ok {
		d.RetryAfter = g.interval // only a larger share will do: try after a sync
	}
	if e.failed {
		d.Path = sluice.PathLocal
	}
	return d, r.Allowed
}

// Reset implements sluice.Limiter: it forgets this node's state for key under limit (its
// share and credit start again from nothing at the next sync). Other nodes' shares and the
// global state, which they still apply, are untouched.
func (g *Global) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	if err := cmp.Or(store.CheckRequest(key, limit, 0), checkBucket(limit)); err != nil {
		return err
	}
	g.mu.Lock()
	if e, ok := g.entries[entryKey{key, limit}]; ok {
		e.mu.Lock()
		e.setShare(0, g.now())
		e.st, e.empty, e.everShared = algo.State{}, true, true // empty: no fresh full bucket after a reset
		e.mu.Unlock()
	}
	g.mu.Unlock()
	return nil
}

// Release implements sluice.Limiter. Global holds no Concurrency limit, so every release
// is an error wrapping sluice.ErrInvalidLimit.
func (g *Global) Release(ctx context.Context, key string, limit sluice.Limit, lease sluice.LeaseID) (bool, error) {
	return false, cmp.Or(store.CheckRelease(key, limit, lease), checkBucket(limit))
}

// Settle implements sluice.Limiter. Global makes no reservations to settle (a request
// with a SettleTTL is decided at its estimate, which stands): every settlement is an error
// wrapping sluice.ErrUnknownReservation, or the error of its bad input.
func (g *Global) Settle(ctx context.Context, key string, limit sluice.Limit, reservation sluice.ReservationID, cost int64) (sluice.Decision, error) {
	if err := cmp.Or(store.CheckSettle(key, limit, reservation, cost), checkBucket(limit)); err != nil {
		return sluice.Decision{}, err
	}
	return sluice.Decision{}, fmt.Errorf("%w: region: global mode keeps no reservations", sluice.ErrUnknownReservation)
}

// Stats is what a node knows about one limit.
type Stats struct {
	// Share is the fraction of the limit (ppm) this node applies.
	Share int64
	// Admitted and AdmittedPrev are the units all nodes reported admitted in the current
	// and previous window of one Period, as of the last sync.
	Admitted, AdmittedPrev int64
	// Nodes is the number of nodes holding a lease on the limit.
	Nodes int64
	// Unreachable reports whether the last sync failed.
	Unreachable bool
}

// Stats returns this node's view of key under limit, and false if the node holds no state
// for it.
func (g *Global) Stats(key string, limit sluice.Limit) (Stats, bool) {
	g.mu.Lock()
	e, ok := g.entries[entryKey{key, limit}]
	g.mu.Unlock()
	if !ok {
		return Stats{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	g.fence(e, g.now())
	return Stats{Share: e.share, Admitted: e.global, AdmittedPrev: e.globalPrev, Nodes: e.nodes, Unreachable: e.failed}, true
}

func (g *Global) loop() {
	defer close(g.stopped)
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		case <-g.wake:
		}
		g.sync()
	}
}

// sync reconciles every live entry in one pipelined round trip.
func (g *Global) sync() {
	now := g.now()
	g.mu.Lock()
	live := make([]*entry, 0, len(g.entries))
	for k, e := range g.entries {
		e.mu.Lock()
		idle := now-e.seen > 2*g.lease.Microseconds() && e.demand == 0
		e.mu.Unlock()
		if idle {
			delete(g.entries, k) // its record in Redis lapses after a lease
			continue
		}
		live = append(live, e)
	}
	g.mu.Unlock()
	if len(live) == 0 {
		return
	}
	type sent struct{ demand, admitted int64 }
	sends := make([]sent, len(live))
	cmds := make(rueidis.Commands, len(live))
	args := make([][]string, len(live))
	leaseUS := g.lease.Microseconds() * 3 / 2
	for i, e := range live {
		e.mu.Lock()
		g.fence(e, now)
		epoch := g.interval.Microseconds()
		if e.sentAt >= 0 {
			epoch = now - e.sentAt
		}
		sends[i] = sent{e.demand, e.admitted}
		e.demand, e.admitted, e.sentAt = 0, 0, now
		args[i] = append(make([]string, 0, 10), g.node)
		for _, v := range []int64{e.share, sends[i].demand, sends[i].admitted, epoch, leaseUS,
			e.full.Rate, e.full.Period, e.full.Burst * e.full.T} {
			args[i] = append(args[i], strconv.FormatInt(v, 10))
		}
		args[i] = append(args[i], "-")
		cmds[i] = g.client.B().Evalsha().Sha1(syncSHA).Numkeys(1).Key(e.rkey).Arg(args[i]...).Build()
		e.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	resps := g.client.DoMulti(ctx, cmds...)
	var retry []int // a NOSCRIPT reply: the script did not run; EVAL runs and loads it
	var again rueidis.Commands
	for i, r := range resps {
		if err, ok := rueidis.IsRedisErr(r.Error()); ok && err.IsNoScript() {
			retry = append(retry, i)
			again = append(again, g.client.B().Eval().Script(syncBody).Numkeys(1).Key(live[i].rkey).Arg(args[i]...).Build())
		}
	}
	for j, r := range g.client.DoMulti(ctx, again...) {
		resps[retry[j]] = r
	}
	var firstErr error
	for i, e := range live {
		vals, err := resps[i].AsIntSlice()
		if err == nil && len(vals) != 5 {
			err = fmt.Errorf("sync script returned %d values, want 5", len(vals))
		}
		e.mu.Lock()
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			e.failed = true
			e.demand += sends[i].demand // reported again with the next sync
			e.admitted += sends[i].admitted
		} else {
			at := g.now()
			e.failed = false
			e.okAt = now
			e.setShare(vals[0], at)
			if vals[1] == 1 && !e.everShared {
				// No node held any share for a lease and the time to fill the bucket:
				// the global bucket is full, and this node is the only one with a share.
				e.st, e.empty = algo.State{}, false // a full bucket
			}
			e.everShared = e.everShared || e.share > 0
			e.global, e.globalPrev, e.nodes = vals[2], vals[3], vals[4]
		}
		e.mu.Unlock()
		e.readyOnce.Do(func() { close(e.ready) })
	}
	switch {
	case firstErr != nil && !g.down.Swap(true):
		g.logger.Warn("region: shared Redis unreachable; deciding from the last shares until the lease runs out",
			"node", g.node, "lease", g.lease, "error", firstErr)
	case firstErr == nil && g.down.Swap(false):
		g.logger.Info("region: shared Redis reachable again", "node", g.node)
	}
}
