// Package redisstore is sluice's Redis store: a [sluice.Limiter] for every
// [sluice.Algorithm] on Redis 6.0 or later (standalone, Sentinel or Cluster), deciding
// exactly as the in-process store (package memory) does. See docs/redis.md for how a call
// runs, tuning, failures and operating Redis.
//
//	store, err := redisstore.Open("redis://localhost:6379")
//	if err != nil { ... }
//	defer store.Close()
//	d, err := store.AllowN(ctx, "user:42", sluice.PerSecond(10), 1)
//
// # Decisions and clock
//
// The limits of a request on one cluster slot are decided by one call of an embedded Lua
// script (lua/*.lua, EVALSHA), a transcription of internal/algo; concurrent decisions for
// one server or slot share a call ([WithBatchSize], [WithConcurrency]). A request whose
// limits span slots is decided all or nothing in two phases that never over-admit
// (docs/redis.md). "Now" is Redis's TIME, in integer microseconds, unless [WithClock].
//
// # Keys and TTLs
//
// One (identity, Limit) is one key ([Store.Key]; the layout and escaping are in key.go),
// whose TTL is the time until its state is equivalent to empty, at least [WithMinTTL]; a
// decision that spends nothing creates no key. docs/redis.md describes the values.
//
// # Errors
//
// Bad input wraps sluice's sentinel errors ([store.IsBadInput]) and spends nothing. Every
// failure is a [sluice.StoreError] of the kind the store gives it ([sluice.KindOf],
// [ConfigError]); before the first connection with [WithConnectRetry], it wraps
// [ErrNotConnected]; after Close, [sluice.ErrClosed]. A decision whose fate is unknown is
// not retried, since it may have spent: failure modes are package failover's.
//
// # Connecting
//
// [Open] takes redis:// or rediss:// (TLS) URLs of a standalone server, a Cluster or
// Sentinel (docs/redis.md lists the forms and options); [New] takes a rueidis.Client for
// anything else. A [ConfigError] fails Open, [WithConnectRetry] or not; met later,
// [Store.Misconfigured] reports it.
//
// # Operating Redis
//
// Run it with maxmemory-policy noeviction (an evicted key is a reset quota: [New] warns
// otherwise, [Store.EvictedKeys] counts them) and hz 100; docs/redis.md says why, and what
// a failover to a replica may admit again.
package redisstore

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/store"
)

// Store is a sluice.Limiter backed by Redis, safe for concurrent use. Create it with Open
// or New.
type Store struct {
	conn   atomic.Pointer[conn] // nil until connected (see WithConnectRetry)
	own    bool                 // Close closes the client
	prefix string
	head   string // prefix + "{", the start of every key
	clock  func() time.Time
	minTTL string // ms, as the script argument
	logger *slog.Logger
	batch  int
	conc   int                                    // script calls in flight per batcher
	limits sync.Map                               // sluice.Limit -> *limitInfo
	recent [recentSlots]atomic.Pointer[limitInfo] // limits' infos by recentSlot

	dialErr   atomic.Pointer[error]       // the last failed connection attempt, while there is no conn
	misconf   atomic.Pointer[ConfigError] // see Misconfigured
	stop      context.Context             // ends when Close starts: the start-up work and connect loop stop
	stopStart context.CancelFunc
	closeMu   sync.RWMutex // excludes Close from startCall, startRun and attaching a connection
	closed    atomic.Bool
	inflight  sync.WaitGroup // batch goroutines, the start-up work and the connect loop
	noscript  atomic.Int64   // NOSCRIPT replies healed; for tests

	loopMu sync.Mutex
	idle   []*batchLoop // batch goroutines waiting for a batch, at most maxIdleLoops
	loops  atomic.Int64 // batch goroutines started; for tests
}

// conn is a connected client and the batchers that send to it.
type conn struct {
	client  rueidis.Client
	cluster bool
	single  *batcher                  // standalone and Sentinel
	slots   []atomic.Pointer[batcher] // Cluster: one per slot, made on first use
}

// ErrNotConnected is wrapped by the errors of decisions made before a store opened with
// WithConnectRetry has reached Redis; the error also wraps the last connection error.
var ErrNotConnected = errors.New("redisstore: not connected to Redis yet")

// usable is connected, or ErrClosed once the store is closed.
func (s *Store) usable() (*conn, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("redisstore: %w", sluice.ErrClosed)
	}
	return s.connected()
}

// connected returns the connection, or an error wrapping ErrNotConnected.
func (s *Store) connected() (*conn, error) {
	if cn := s.conn.Load(); cn != nil {
		return cn, nil
	}
	if p := s.dialErr.Load(); p != nil {
		kind := store.KindRefused
		if sluice.KindOf(*p) == store.KindMisconfigured {
			kind = store.KindMisconfigured
		}
		return nil, &sluice.StoreError{Kind: kind, Err: fmt.Errorf("%w: %w", ErrNotConnected, *p)}
	}
	return nil, &sluice.StoreError{Kind: store.KindRefused, Err: ErrNotConnected}
}

// Option configures a Store.
type Option func(*options) error

type options struct {
	prefix   string
	clock    func() time.Time
	minTTL   time.Duration
	logger   *slog.Logger
	batch    int
	inflight int
	retry    bool
}

// WithPrefix sets the prefix of every key (default DefaultPrefix, "sluice:"). It must not
// contain '{' or '}', which would move the hash tag out of the identity.
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("redisstore: prefix %q must not contain '{' or '}'", prefix)
		}
		o.prefix = prefix
		return nil
	}
}

// WithClock makes the store decide at clock's time instead of Redis's TIME, for tests and
// simulation, as memory.WithClock does (times before 1970-01-01T00:00:00.000001Z count as
// that instant). Key TTLs still run out on Redis's clock: with a clock slower than real
// time, add WithMinTTL.
func WithClock(clock func() time.Time) Option {
	return func(o *options) error {
		o.clock = clock
		return nil
	}
}

// WithMinTTL raises every key's TTL to at least d (default 0). Longer TTLs never change a
// decision; they only keep empty state around longer.
func WithMinTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("redisstore: negative minimum TTL %v", d)
		}
		o.minTTL = d
		return nil
	}
}

// WithLogger sets the logger for warnings (eviction policy, script loading). The default
// is slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		o.logger = l
		return nil
	}
}

// WithBatchSize sets the most decisions one script call may carry (default 128). 1 turns
// coalescing off: every decision is its own call.
func WithBatchSize(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("redisstore: batch size must be at least 1, got %d", n)
		}
		o.batch = n
		return nil
	}
}

// WithConcurrency sets how many script calls may be in flight at once per server (per slot
// on a cluster); default 2. Decisions arriving while that many are in flight wait for the
// next call, which carries all of them; beyond two calls in flight, a new one starts only
// when at least 8 decisions are waiting for it. More calls trade Redis's time for the
// client's throughput.
func WithConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("redisstore: concurrency must be at least 1, got %d", n)
		}
		o.inflight = n
		return nil
	}
}

// WithConnectRetry makes Open succeed when Redis cannot be reached yet: the store keeps
// trying to connect in the background (every 100 ms, backing off to every 5 s), and until
// it succeeds every decision fails at once with an error wrapping ErrNotConnected and the
// last connection error. A malformed URL, or a first attempt that Redis refuses for the
// store's settings (a ConfigError), still fails Open. A misconfiguration met later is
// retried, reported by Misconfigured and Ping, and logged at most once per
// MisconfigLogEvery. New ignores it.
func WithConnectRetry() Option {
	return func(o *options) error {
		o.retry = true
		return nil
	}
}

// Open connects to the Redis named by url (see the package doc for the URL forms) and
// returns a Store that owns the connection: Close closes it.
func Open(url string, opts ...Option) (*Store, error) {
	if err := CheckURL(url); err != nil {
		return nil, err
	}
	url, caFile, err := cutCAFile(url)
	if err != nil {
		return nil, err
	}
	copt, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("redisstore: ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redisstore: ca_file %s holds no PEM certificate", caFile)
		}
		copt.TLSConfig.RootCAs = pool
	}
	copt.DisableCache = true
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	client, err := rueidis.NewClient(copt)
	if err != nil {
		err = fmt.Errorf("redisstore: connect: %w", storeError(err))
		if !o.retry || sluice.KindOf(err) == store.KindMisconfigured {
			return nil, err
		}
	}
	s := newStore(o)
	s.own = true
	if err == nil {
		s.attach(client)
		return s, nil
	}
	s.dialErr.Store(&err)
	s.logger.Warn("redisstore: Redis is not reachable; decisions fail until it is, retrying in the background", "error", err)
	s.inflight.Add(1)
	go s.connectLoop(copt)
	return s, nil
}

// CheckURL reports whether url has a scheme Open takes (redis, rediss, unix, valkey,
// valkeys; see docs/redis.md), and for a host:port without one, suggests redis://.
func CheckURL(url string) error {
	scheme, rest, ok := strings.Cut(url, "://")
	switch {
	case !ok:
		return fmt.Errorf("redisstore: %q is not a Redis URL; did you mean redis://%s?", url, url)
	case !slices.Contains([]string{"redis", "rediss", "unix", "valkey", "valkeys"}, scheme):
		return fmt.Errorf("redisstore: %q: unknown scheme %s://; did you mean redis://%s?", url, scheme, rest)
	}
	return nil
}

// cutCAFile removes the ca_file query option (rediss:// only) from raw and returns it.
func cutCAFile(raw string) (string, string, error) {
	if !strings.Contains(raw, "ca_file=") {
		return raw, "", nil
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("redisstore: %w", err)
	}
	q := u.Query()
	ca := q.Get("ca_file")
	if u.Scheme != "rediss" {
		return "", "", errors.New("redisstore: ca_file applies only to rediss:// URLs")
	}
	if ca == "" {
		return "", "", errors.New("redisstore: ca_file is empty")
	}
	q.Del("ca_file")
	u.RawQuery = q.Encode()
	return u.String(), ca, nil
}

// MisconfigLogEvery is the least time between two log records of the same
// misconfiguration met while connecting.
const MisconfigLogEvery = time.Minute

// connectLoop tries to connect until it succeeds or Close starts.
func (s *Store) connectLoop(copt rueidis.ClientOption) {
	defer s.inflight.Done()
	wait := 100 * time.Millisecond
	var logged time.Time // when the misconfiguration last logged was
	var loggedCause string
	for {
		select {
		case <-s.stop.Done():
			return
		case <-time.After(wait):
		}
		client, err := rueidis.NewClient(copt)
		if err == nil {
			s.closeMu.RLock()
			defer s.closeMu.RUnlock()
			if s.closed.Load() {
				client.Close()
				return
			}
			s.attach(client)
			s.logger.Info("redisstore: connected to Redis")
			return
		}
		err = fmt.Errorf("redisstore: connect: %w", storeError(err))
		s.dialErr.Store(&err)
		ce := s.noteMisconfig(err)
		if ce != nil && (ce.Cause != loggedCause || time.Since(logged) >= MisconfigLogEvery) {
			s.logger.Error("redisstore: Redis refuses the store's settings; decisions fail until the settings are fixed, still retrying",
				"cause", ce.Cause, "error", err, "next_report_in", MisconfigLogEvery)
			logged, loggedCause = time.Now(), ce.Cause
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// New returns a Store using client, which the caller keeps owning (Close leaves it open).
// It does not fail or wait when Redis is unreachable; decisions fail until it is back.
func New(client rueidis.Client, opts ...Option) (*Store, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	s := newStore(o)
	s.attach(client)
	return s, nil
}

func buildOptions(opts []Option) (options, error) {
	o := options{prefix: DefaultPrefix, batch: 128, inflight: 2}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	o.logger = cmp.Or(o.logger, slog.Default())
	return o, nil
}

func newStore(o options) *Store {
	s := &Store{
		prefix: o.prefix,
		head:   o.prefix + "{",
		clock:  o.clock,
		minTTL: strconv.FormatInt(o.minTTL.Milliseconds(), 10),
		logger: o.logger,
		batch:  o.batch,
		conc:   o.inflight,
	}
	s.stop, s.stopStart = context.WithCancel(context.Background())
	return s
}

// attach makes client the store's connection, and loads the script and checks the
// eviction policy in the background.
func (s *Store) attach(client rueidis.Client) {
	cn := &conn{client: client, cluster: client.Mode() == rueidis.ClientModeCluster}
	if cn.cluster {
		cn.slots = make([]atomic.Pointer[batcher], 16384)
	} else {
		cn.single = newBatcher(s, cn, s.conc)
	}
	s.conn.Store(cn)
	s.dialErr.Store(nil)
	s.misconf.Store(nil)
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		ctx, cancel := context.WithTimeout(s.stop, 5*time.Second)
		defer cancel()
		if err := s.loadScripts(ctx, client); err != nil && !s.closed.Load() {
			s.logger.Warn("redisstore: could not preload the decision script; it will be loaded on first use", "error", err)
		}
		if !s.closed.Load() {
			_, _ = s.CheckEviction(ctx)
			s.checkHz(ctx)
		}
	}()
}

// Close stops accepting decisions, waits for the script calls in flight, ends the store's
// goroutines, and closes the connection if Open made it. Decisions after Close return an
// error wrapping sluice.ErrClosed.
func (s *Store) Close() error {
	s.closeMu.Lock()
	already := s.closed.Swap(true)
	s.closeMu.Unlock()
	if already {
		return nil
	}
	s.endLoops()
	s.stopStart()
	s.inflight.Wait()
	if cn := s.conn.Load(); cn != nil && s.own {
		cn.client.Close()
	}
	return nil
}

// Prefix returns the prefix of the store's keys (WithPrefix).
func (s *Store) Prefix() string { return s.prefix }

// Concurrency returns how many script calls may be in flight at once per server
// (WithConcurrency).
func (s *Store) Concurrency() int { return s.conc }

// Client returns the rueidis client the store uses, or nil while a store opened with
// WithConnectRetry has not connected yet.
func (s *Store) Client() rueidis.Client {
	if cn := s.conn.Load(); cn != nil {
		return cn.client
	}
	return nil
}

// Ping reports whether Redis answers: the connection error while a store opened with
// WithConnectRetry has not connected, else the outcome of a PING, classified as a
// decision's errors are. It is a readiness check.
func (s *Store) Ping(ctx context.Context) error {
	cn, err := s.connected()
	if err != nil {
		return err
	}
	if err := cn.client.Do(ctx, cn.client.B().Ping().Build()).Error(); err != nil {
		err = wrap(ctx, "PING", err)
		s.noteMisconfig(err)
		return err
	}
	s.misconf.Store(nil)
	return nil
}

// Misconfigured returns the ConfigError the store's latest connection attempt or Ping
// met, or nil once one succeeds or fails for another reason.
func (s *Store) Misconfigured() *ConfigError { return s.misconf.Load() }

// noteMisconfig records err's misconfiguration, or its absence, for Misconfigured.
func (s *Store) noteMisconfig(err error) *ConfigError {
	ce, _ := errors.AsType[*ConfigError](err)
	s.misconf.Store(ce)
	return ce
}

// limitInfo is what the store derives once per Limit.
type limitInfo struct {
	limit sluice.Limit
	tail  string // ends the limit's keys: "}" and its limitSuffix
	// packed is the request's first four fields as decide.lua reads them, little-endian
	// doubles: limitCode, rate and period µs (S and U of algo.Params for the bucket
	// machine), and effective burst; args are the same as decimals.
	packed  [32]byte
	args    [4]string
	code    int // limitCode
	maxCost int64
}

// recentSlots is the size of Store.recent.
const recentBits, recentSlots = 6, 1 << 6

// recentSlot is l's slot in Store.recent; the calendar fields are left out.
func recentSlot(l sluice.Limit) int {
	h := uint64(l.Algorithm) ^ uint64(l.Rate)*0x9e3779b97f4a7c15 ^ uint64(l.Period)*0xc2b2ae3d27d4eb4f ^
		uint64(l.Burst)*0x165667b19e3779f9 ^ uint64(l.Lease)*0xd6e8feb86659fd93
	return int((h * 0x9e3779b97f4a7c15) >> (64 - recentBits))
}

// checkedInfo checks a request as store.CheckRequest does and returns its limit's info.
// Only valid limits have an info, so a recent one's limit is not validated again.
func (s *Store) checkedInfo(key string, limit sluice.Limit, n int64) (*limitInfo, error) {
	if li := s.recent[recentSlot(limit)].Load(); li != nil && li.limit == limit && n >= 0 && n <= li.maxCost && store.ValidKey(key) {
		return li, nil
	}
	if err := store.CheckRequest(key, limit, n); err != nil {
		return nil, err
	}
	return s.info(limit), nil
}

// info returns what the store derives from l, made on l's first use. l must be valid.
func (s *Store) info(l sluice.Limit) *limitInfo {
	slot := &s.recent[recentSlot(l)]
	if li := slot.Load(); li != nil && li.limit == l {
		return li
	}
	v, ok := s.limits.Load(l)
	if !ok {
		p := algo.ParamsOf(l)
		li := &limitInfo{limit: l, tail: limitTail(l), code: limitCode(l), maxCost: l.MaxCost()}
		b := li.packed[:0]
		f1, f2 := p.Rate, p.Period // Concurrency: Period is the lease
		if li.code == int(sluice.GCRA) {
			f1, f2 = p.S, p.U
		}
		for i, x := range []int64{int64(li.code), f1, f2, p.Burst} {
			li.args[i] = strconv.FormatInt(x, 10)
			b = appendFloat(b, x)
		}
		v, _ = s.limits.LoadOrStore(l, li)
	}
	li := v.(*limitInfo)
	slot.Store(li)
	return li
}

// Key returns the Redis key holding key's state under limit.
func (s *Store) Key(key string, limit sluice.Limit) string {
	return string(s.appendKey(nil, key, limitTail(limit)))
}

func (s *Store) redisKey(key string, li *limitInfo) string {
	return string(s.appendKey(nil, key, li.tail))
}

// appendKey appends to b the Redis key of identity key under the limit of tail (key.go).
func (s *Store) appendKey(b []byte, key, tail string) []byte {
	b = append(b, s.head...)
	b = appendEscaped(b, key)
	return append(b, tail...)
}

// AllowN is Decide of one request.
func (s *Store) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Decision, error) {
	var d [1]sluice.Decision
	_, err := s.Decide(ctx, []sluice.Request{{Key: key, Limit: limit, N: n}}, d[:])
	return d[0], err
}

// Decide implements sluice.Limiter: the requests are decided all or nothing, in one script
// call, or across cluster slots by Store.allowAcrossSlots. Errors come classified.
func (s *Store) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	start := time.Now()
	err := s.decide(ctx, reqs, ds)
	return sluice.Report{StoreCalled: !store.IsBadInput(err), StoreLatency: time.Since(start), Kind: sluice.KindOf(err)}, err
}

func (s *Store) decide(ctx context.Context, reqs []sluice.Request, out []sluice.Decision) error {
	if len(out) < len(reqs) {
		return store.CheckRequests(reqs, out)
	}
	if len(reqs) == 0 {
		return nil
	}
	c := getCall(ctx)
	c.items, c.res = c.one[:0], c.oneRes[:]
	if len(reqs) > 1 {
		c.items, c.res = make([]item, 0, len(reqs)), make([]algo.Outcome, len(reqs))
	}
	cn, err := s.prepare(reqs, out, c)
	if err != nil {
		putCall(c)
		return err
	}
	cross, settled := false, false
	for i := range reqs {
		cross = cross || cn.cluster && idSlot(reqs[i].Key) != idSlot(reqs[0].Key)
		settled = settled || reqs[i].SettleTTL > 0 && reqs[i].N > 0
	}
	if settled || cross {
		putCall(c)
		reqs := slices.Clone(reqs) // a copy, kept beyond the call, so that AllowN's stays on its stack
		if settled {
			return s.decideSettled(ctx, cn, reqs, out)
		}
		ds, err := s.allowAcrossSlots(ctx, reqs, nil)
		if err != nil {
			return err
		}
		copy(out, ds)
		return nil
	}
	if err := s.submit(ctx, cn, c); err != nil {
		return err
	}
	for i, r := range c.res {
		out[i] = r.Decision(reqs[i].Limit)
	}
	putCall(c)
	return nil
}

// prepare checks reqs (store.CheckRequests, store.CheckDistinct) and appends their items
// to c's; then it returns the connection to decide them on.
func (s *Store) prepare(reqs []sluice.Request, out []sluice.Decision, c *call) (*conn, error) {
	for i := range reqs {
		r := &reqs[i]
		li, err := s.checkedInfo(r.Key, r.Limit, r.N)
		if err != nil || store.CheckSettleTTL(r.Limit, r.SettleTTL) != nil {
			return nil, store.CheckRequests(reqs, out) // the same checks, with the request's index
		}
		c.items = append(c.items, newItem(r.Key, li, r.N))
	}
	if err := store.CheckDistinct(reqs); err != nil {
		return nil, err
	}
	return s.usable()
}

// Reset implements sluice.Limiter: it deletes key's state under limit.
func (s *Store) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	if err := store.CheckRequest(key, limit, 0); err != nil {
		return err
	}
	cn, err := s.usable()
	if err != nil {
		return err
	}
	k := s.redisKey(key, s.info(limit))
	if err := cn.client.Do(ctx, cn.client.B().Del().Key(k).Build()).Error(); err != nil {
		return wrap(ctx, "reset", err)
	}
	return nil
}

// Release implements sluice.Limiter: one script call (lua/release.lua) on the lease set.
func (s *Store) Release(ctx context.Context, key string, limit sluice.Limit, lease sluice.LeaseID) (bool, error) {
	if err := store.CheckRelease(key, limit, lease); err != nil {
		return false, err
	}
	cn, err := s.usable()
	if err != nil {
		return false, err
	}
	k := s.redisKey(key, s.info(limit))
	args := []string{s.scriptNow(), s.minTTL, strconv.FormatUint(uint64(lease), 10)}
	n, err := s.eval(ctx, cn.client, releaseScript, []string{k}, args).AsInt64()
	if err != nil {
		return false, wrap(ctx, "release", err)
	}
	return n == 1, nil
}

// wrap describes a failed call to Redis made under ctx and classifies it (failed).
func wrap(ctx context.Context, what string, err error) error {
	return failed(ctx, fmt.Errorf("redisstore: %s: %w", what, err))
}

func errorf(format string, args ...any) error {
	return errors.New("redisstore: " + fmt.Sprintf(format, args...))
}

var _ sluice.Limiter = (*Store)(nil)
