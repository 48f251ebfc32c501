// Package redisstore is sluice's Redis store: a [sluice.Limiter] for every
// [sluice.Algorithm] on Redis 6.0 or later (standalone, Sentinel or Cluster), deciding
// exactly as the in-process store (package memory) does. docs/redis.md is the guide: how a
// call runs, tuning, failures and operating Redis.
//
//	store, err := redisstore.Open("redis://localhost:6379")
//	if err != nil { ... }
//	defer store.Close()
//	d, err := store.AllowN(ctx, "user:42", sluice.PerSecond(10), 1)
//
// # Decisions and clock
//
// The limits of a request on one cluster slot are decided by one call of an embedded Lua
// script (lua/*.lua, called with EVALSHA), a transcription of internal/algo that a
// differential test holds to the memory store's Decisions; concurrent decisions for one
// server or slot share a call ([WithBatchSize], [WithConcurrency]). A request whose limits
// span slots is decided all or nothing in two phases: each slot decides and spends, and if
// any denies, the slots that spent are refunded. A refund never over-admits; between the
// phases a concurrent request may be under-admitted for about a round trip. "Now" is
// Redis's clock (TIME, inside the script), in integer microseconds, unless [WithClock].
//
// # Keys and TTLs
//
// One (identity, Limit) is one key, "<prefix>{<escaped identity>}:<algorithm>:<rate>:<period
// µs>:<burst>" ([Store.Key], [DefaultPrefix]), with ":bucket" before the algorithm for GCRA,
// TokenBucket and LeakyBucket, one state machine: the identity in a hash tag, escaped so
// that no identity collides with another or leaves its slot. Keys of the bucket names
// without ":bucket" hold the states of the three machines they once were and are never
// read: they expire by their TTL, and their identities start afresh with a full bucket
// (key.go, docs/redis.md). A string holds the state's fields as
// little-endian doubles; SlidingLog and Concurrency keys are sorted sets; a reservation to
// settle is "<limiter key>:res:<id>", in the same slot. Every key's TTL is the time until
// its state is equivalent to empty (algo.ExpiresAt), rounded up to a millisecond, and at
// least [WithMinTTL]. A decision that spends nothing never creates a key.
//
// # Errors
//
// Bad input wraps sluice's sentinel errors ([store.IsBadInput]) and spends nothing. Every
// failure is a [sluice.StoreError] of the kind the store gives it ([sluice.KindOf]):
// timeouts, refused and reset connections, BUSY, OOM, LOADING, READONLY, CLUSTERDOWN,
// redirections, missing scripts, misconfigurations ([ConfigError]); before the first
// connection with [WithConnectRetry], one wrapping [ErrNotConnected]; after Close,
// [sluice.ErrClosed]. A decision whose fate is unknown is not retried, since it may have
// spent: failure modes are package failover's. A live caller never gets a cancellation
// ([store.ForeignCancel]).
//
// # Connecting
//
// [Open] takes redis:// or rediss:// (TLS) URLs: standalone "host:port[/db]", a Cluster by
// any seed nodes ("?addr=host2:port&addr=..."), Sentinel ("?addr=...&master_set=name"); ACL
// user and password; dial_timeout, write_timeout, client_name, db, and for rediss ca_file
// and skip_verify. [New] takes a rueidis.Client for anything else (client certificates,
// Sentinel credentials). A connection Redis refuses for the store's settings (a
// [ConfigError]: credentials, a database it lacks, a certificate that does not verify, a
// cluster or Sentinel URL of a server that is not one) fails Open, [WithConnectRetry] or
// not: no retry fixes it. Met later, it is a failure of kind store.KindMisconfigured,
// which [Store.Misconfigured] reports.
//
// # Operating Redis
//
// Run it with maxmemory-policy noeviction (an evicted key is a reset quota: [New] warns
// otherwise, [Store.EvictedKeys] counts them) and hz 100 (its key expiry is most of the tail
// latency). Replication is asynchronous: when a replica takes over, a key can be admitted
// again at most what the old primary admitted for it during its replication lag, and never
// more than its limit.
package redisstore

import (
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

// Store is a sluice.Limiter backed by Redis. It is safe for
// concurrent use. Create it with Open or New.
type Store struct {
	conn   atomic.Pointer[conn] // nil until connected (see WithConnectRetry)
	own    bool                 // Close closes the client
	prefix string
	head   string // prefix + "{", the start of every key
	clock  func() time.Time
	minTTL string // ms, as the script argument
	logger *slog.Logger
	batch  int
	conc   int      // script calls in flight per batcher
	limits sync.Map // sluice.Limit -> *limitInfo
	// recent caches limits' infos by recentSlot: a sync.Map lookup hashes the Limit
	// field by field (runtime.typehash), which cost more than the rest of a decision's
	// client-side bookkeeping.
	recent [recentSlots]atomic.Pointer[limitInfo]

	dialErr atomic.Pointer[error] // the last failed connection attempt, while there is no conn
	// misconf is the misconfiguration the latest connection attempt or Ping met; nil
	// after one that succeeded or failed otherwise.
	misconf   atomic.Pointer[ConfigError]
	stop      context.Context // ends when Close starts: the start-up work and connect loop stop
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

// connected returns the connection, or an error wrapping ErrNotConnected.
// usable is the connection for a call: ErrClosed once the store is closed, else as
// connected.
func (s *Store) usable() (*conn, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("redisstore: %w", sluice.ErrClosed)
	}
	return s.connected()
}

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

// WithClock makes the store decide at clock's time, passed to the script, instead of
// Redis's TIME. It exists for tests and simulation, as memory.WithClock does, and like it
// counts times before 1970-01-01T00:00:00.000001Z as that instant.
//
// Key TTLs are computed in that clock but run out on Redis's: with a clock that runs slower
// than real time (a frozen test clock), Redis would drop state the caller still considers
// live. Combine it with WithMinTTL in that case.
func WithClock(clock func() time.Time) Option {
	return func(o *options) error {
		o.clock = clock
		return nil
	}
}

// WithMinTTL raises every key's TTL to at least d (default 0: the TTL is exactly the time
// until the state is empty, rounded up to a millisecond). Longer TTLs never change a
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
// when at least 8 decisions are waiting for it (see minExtraCall).
//
// More calls in flight trade Redis's time for the client's throughput: each call carries
// fewer decisions, and Redis pays its cost per call more often (bench/README.md). Redis is
// usually what many clients share, so the default spends less of it.
func WithConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("redisstore: concurrency must be at least 1, got %d", n)
		}
		o.inflight = n
		return nil
	}
}

// WithConnectRetry makes Open succeed when Redis cannot be reached yet (it is down, or
// starts after the application): the store keeps trying to connect in the background,
// every 100 ms at first and backing off to every 5 s, and until it succeeds every
// decision fails at once with an error wrapping ErrNotConnected and the last connection
// error, so that a failover decorator applies its failure mode. A service should not exit
// or wait because its Redis is down when it starts. Without it, Open returns the
// connection error. A malformed URL is an error either way, and so is a first connection
// attempt that Redis refuses for the store's settings (a ConfigError: credentials, a
// database it does not have, a certificate that does not verify, a cluster or Sentinel URL
// of a server that is not one), which retrying cannot fix: the operator must. Once the
// store is retrying, a misconfiguration met later is kept retrying (the server's settings
// may be fixed), reported by Misconfigured and Ping, and logged at most once per
// MisconfigLogEvery. New ignores it.
func WithConnectRetry() Option {
	return func(o *options) error {
		o.retry = true
		return nil
	}
}

// Open connects to the Redis named by url (see the package doc for the URL forms) and
// returns a Store that owns the connection: Close closes it. See WithConnectRetry for a
// Redis that is not reachable yet.
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

// CheckURL reports whether url has one of the schemes Open takes (redis://, rediss://,
// unix://, and valkey:// and valkeys:// for redis:// and rediss://; docs/redis.md lists the forms),
// and for a host:port without one, suggests redis://.
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

// cutCAFile removes the ca_file query option from raw (rueidis does not know it) and
// returns it; it applies to rediss:// URLs only.
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
		if wait = 2 * wait; wait > 5*time.Second {
			wait = 5 * time.Second
		}
	}
}

// New returns a Store using client, which the caller keeps owning (Close leaves it open).
// It loads the script and checks the eviction policy in the background, so it does not
// fail or wait when Redis is unreachable; decisions then fail until it is back.
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
	if o.logger == nil {
		o.logger = slog.Default()
	}
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

// Ping reports whether Redis answers: the connection error (wrapping ErrNotConnected)
// while a store opened with WithConnectRetry has not connected, else the outcome of a
// PING, classified as a decision's errors are (sluice.KindOf). A readiness check
// (server.Options.Ready uses it when the Limiter has it).
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

// Misconfigured returns the misconfiguration the store's latest connection attempt or
// Ping met: an error retrying cannot fix, which only the operator can (see ConfigError).
// It is nil once one succeeds, or fails for another reason.
func (s *Store) Misconfigured() *ConfigError { return s.misconf.Load() }

// noteMisconfig records err's misconfiguration, or its absence, for Misconfigured.
func (s *Store) noteMisconfig(err error) *ConfigError {
	var ce *ConfigError
	if !errors.As(err, &ce) {
		ce = nil
	}
	s.misconf.Store(ce)
	return ce
}

// limitInfo is what the store derives once per Limit.
type limitInfo struct {
	limit sluice.Limit
	// tail ends the limit's keys: "}" and its limitSuffix.
	tail string
	// packed is the request's first four fields as decide.lua reads them, each a
	// little-endian double: algorithm, rate and period µs (for the bucket algorithms S and
	// U of algo.Params instead: one unit costs U/S µs, exactly Period/Rate), and effective
	// burst.
	packed [32]byte
	// args are the same four fields as decimal arguments, for the reservation script.
	args [4]string
	// code is the scripts' number for the limit (limitCode): its Algorithm, GCRA's for the
	// three bucket names, or calendarCode (whose period field is then per call, see
	// calendarArgs).
	code int
	// maxCost is limit.MaxCost().
	maxCost int64
}

// recentSlots is the size of Store.recent.
const recentBits, recentSlots = 6, 1 << 6

// recentSlot is l's slot in Store.recent. Limits that share a slot evict each other;
// the calendar fields are left out (calendar limits of one rate share a slot).
func recentSlot(l sluice.Limit) int {
	h := uint64(l.Algorithm) ^ uint64(l.Rate)*0x9e3779b97f4a7c15 ^ uint64(l.Period)*0xc2b2ae3d27d4eb4f ^
		uint64(l.Burst)*0x165667b19e3779f9 ^ uint64(l.Lease)*0xd6e8feb86659fd93
	return int((h * 0x9e3779b97f4a7c15) >> (64 - recentBits))
}

// checkedInfo checks a request as store.CheckRequest does and returns the info of its
// limit. Only valid limits have an info, so a limit found among the recent ones is not
// validated again: only the key (store.ValidKey) and the cost, within [0, MaxCost], are
// checked, as CheckRequest documents. Anything else takes store.CheckRequest, for its
// error.
func (s *Store) checkedInfo(key string, limit sluice.Limit, n int64) (*limitInfo, error) {
	if li := s.recent[recentSlot(limit)].Load(); li != nil && li.limit == limit && n >= 0 && n <= li.maxCost && store.ValidKey(key) {
		return li, nil
	}
	if err := store.CheckRequest(key, limit, n); err != nil {
		return nil, err
	}
	return s.info(limit), nil
}

// info returns what the store derives from l, made on l's first use. l must be valid
// (sluice.Limit.Validate).
func (s *Store) info(l sluice.Limit) *limitInfo {
	slot := &s.recent[recentSlot(l)]
	if li := slot.Load(); li != nil && li.limit == l {
		return li
	}
	li := s.makeInfo(l)
	slot.Store(li)
	return li
}

func (s *Store) makeInfo(l sluice.Limit) *limitInfo {
	if v, ok := s.limits.Load(l); ok {
		return v.(*limitInfo)
	}
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
	v, _ := s.limits.LoadOrStore(l, li)
	return v.(*limitInfo)
}

// Key returns the Redis key holding key's state under limit.
func (s *Store) Key(key string, limit sluice.Limit) string {
	return string(s.appendKey(nil, key, limitTail(limit)))
}

func (s *Store) redisKey(key string, li *limitInfo) string {
	return string(s.appendKey(nil, key, li.tail))
}

// appendKey appends to b the Redis key of identity key under the Limit whose
// limitInfo.tail is tail (the layout in key.go).
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

// Decide implements sluice.Limiter: the requests are decided in one script call, all or
// nothing. On a cluster, requests whose keys are in several slots (several identities)
// are decided all or nothing too, by the protocol in "Decisions across cluster slots"
// (Store.allowAcrossSlots). Errors of Redis come classified (sluice.KindOf).
func (s *Store) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	start := time.Now()
	err := s.decide(ctx, reqs, ds)
	return report(err, time.Since(start)), err
}

// report is the Report of a decision that answered err after latency.
func report(err error, latency time.Duration) sluice.Report {
	if err == nil {
		return sluice.Report{StoreCalled: true, StoreLatency: latency}
	}
	return sluice.Report{StoreCalled: !store.IsBadInput(err), StoreLatency: latency, Kind: sluice.KindOf(err)}
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
	cn, err := s.prepare(reqs, c)
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
		// A copy, so that reqs stays where its caller put it (AllowN's, on its stack):
		// these rarer paths keep the requests beyond the call.
		reqs := slices.Clone(reqs)
		if settled {
			return s.decideSettled(ctx, cn, reqs, out, cross)
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

// prepare checks reqs (as store.CheckRequests does, and that no key and limit repeat)
// and appends their items to c's; then it returns the connection to decide them on.
func (s *Store) prepare(reqs []sluice.Request, c *call) (*conn, error) {
	for i := range reqs {
		r := &reqs[i]
		li, err := s.checkedInfo(r.Key, r.Limit, r.N)
		if err == nil {
			err = store.CheckSettleTTL(r.Limit, r.SettleTTL)
		}
		if err != nil {
			if len(reqs) > 1 {
				err = fmt.Errorf("request %d: %w", i, err)
			}
			return nil, err
		}
		c.items = append(c.items, newItem(r.Key, li, r.N))
	}
	if len(reqs) > 1 {
		type ident struct {
			key   string
			limit sluice.Limit
		}
		seen := make(map[ident]int, len(reqs))
		for i, r := range reqs {
			id := ident{r.Key, r.Limit}
			if j, dup := seen[id]; dup {
				return nil, fmt.Errorf("%w: request %d repeats the key and limit of request %d", sluice.ErrInvalidKey, i, j)
			}
			seen[id] = i
		}
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

// wrap describes a failed call to Redis made under ctx and classifies it (see failed).
func wrap(ctx context.Context, what string, err error) error {
	return failed(ctx, fmt.Errorf("redisstore: %s: %w", what, err))
}

func errorf(format string, args ...any) error {
	return errors.New("redisstore: " + fmt.Sprintf(format, args...))
}

var _ sluice.Limiter = (*Store)(nil)
