package httplimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/evaluator"
	"github.com/sluicehq/sluice/internal/logattr"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
	"github.com/sluicehq/sluice/internal/route"
	"github.com/sluicehq/sluice/internal/sfv"
	"github.com/sluicehq/sluice/internal/span"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/overload"
	"github.com/sluicehq/sluice/store"
)

// DefaultUnavailableRetryAfter is the Retry-After sent with a 503 when Config leaves it 0.
const DefaultUnavailableRetryAfter = time.Second

// ErrIdentify wraps the error of a KeyFunc that could not identify a request's client.
var ErrIdentify = errors.New("httplimit: cannot identify client")

// ErrEstimate: a request's cost estimate, from a trusted peer (Settle.EstimateFrom), is not
// a non-negative integer. The request is answered 400.
var ErrEstimate = errors.New("httplimit: bad cost estimate")

// Config configures a Middleware.
type Config struct {
	// Limiter decides the policies that apply to a request. Build it with package stack
	// to get the production stack. Required.
	Limiter sluice.Limiter
	// Policies are the limits to apply; see Policy.
	Policies []Policy
	// Tier returns the request's tier ("free", "pro"), used to pick Policy.Tiers entries.
	// Nil means every request has tier "".
	Tier func(*http.Request) string
	// LegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset
	// for the tightest policy (docs/http.md, "Headers").
	LegacyHeaders bool
	// ShadowHeaders puts shadow policies in the headers too. By default they stay out: a
	// client obeying one would stop sending although nothing is enforced.
	ShadowHeaders bool
	// Logger receives one record per policy decision (Info when the policy denied the
	// request, Warn when a shadow policy would have, Debug otherwise) and one per limiter
	// error (Error). Records carry the store key and identity, never a raw API key. Nil
	// means no logging.
	Logger *slog.Logger
	// UnavailableRetryAfter is the Retry-After sent when the limiter fails; it is
	// rounded up to whole seconds. 0 means DefaultUnavailableRetryAfter.
	UnavailableRetryAfter time.Duration
	// Limited writes the response to a denied request. RateLimit-Policy, RateLimit and
	// Retry-After are already set on w. Nil means DefaultLimited (429 problem).
	Limited func(w http.ResponseWriter, r *http.Request, res *Result)
	// Unavailable writes the response when the limiter failed (the error wraps
	// sluice.ErrStoreUnavailable, or is any other store error). Retry-After is already
	// set. Nil means DefaultUnavailable (503 problem).
	Unavailable func(w http.ResponseWriter, r *http.Request, err error)
	// Error writes the response when the request could not be decided because of bad
	// input: a KeyFunc error (wrapping ErrIdentify) or a limiter error for which
	// store.IsBadInput is true. Nil means DefaultError (500 problem).
	Error func(w http.ResponseWriter, r *http.Request, err error)
	// TracerProvider, when set, traces each request's decision: one span (a child of the
	// request context's span, else of the request's W3C traceparent), whose context the
	// next handler's request carries (docs/http.md, "Traces"). Nil traces nothing, at no
	// cost.
	TracerProvider trace.TracerProvider

	// Trust, when set, is the keys.ClientIP whose verdict on a request's peer the
	// middleware takes once, before anything reads a header, for every reading built on
	// it (see Trust in the package doc). Nil: each reading tests the peer itself.
	Trust *keys.ClientIP

	// Overload, when set, is the adaptive concurrency limit of the wrapped handler
	// (package overload): each request asks it for a permit, with its criticality, before
	// the rate limits are decided, so a shed request costs no store call. A shed request
	// is answered by Shed; a request the rate limits deny, or that cannot be decided,
	// gives its permit back without a latency sample (overload.Permit.Drop), so it spends
	// nothing anywhere; an allowed one holds it while the handler runs, and Releases it
	// when the handler returns (Drop when it panics). Nil: no overload limit.
	Overload *overload.Limiter
	// Criticality, when set, returns the criticality a request claims, and whether it
	// claims a valid one; use TrustedCriticality, so that only a trusted peer's claim is
	// believed. A request's criticality is its valid claim when it has one; else the
	// highest Policy.Criticality among the policies whose Route the request matches (an
	// empty Route matches every request), whatever their identities and limits; else
	// DefaultCriticality. Used only with Overload.
	Criticality func(*http.Request) (overload.Criticality, bool)
	// DefaultCriticality is the criticality of a request that neither claims one nor
	// matches a policy that sets one (the zero value is overload.Default).
	DefaultCriticality overload.Criticality
	// Shed writes the response to a request the overload limit shed. Retry-After (from
	// overload.Shed.RetryAfter, whole seconds, at least 1) is already set. Nil means
	// DefaultShed (503 temporary-reduced-capacity problem).
	Shed func(w http.ResponseWriter, r *http.Request, shed *overload.Shed)
	// OnOverload, when set, is told the outcome of every request that asked Overload
	// for a permit: shed is nil when it was admitted (for metrics: observe.OverloadMetrics).
	// Shed requests are also logged, at Warn, to Logger.
	OnOverload func(c overload.Criticality, shed *overload.Shed)
}

// Result is what the middleware decided for one request.
type Result struct {
	// Decisions has one entry per policy that applied, in Config.Policies order. In a
	// denied request nothing is spent: the other policies report their state as it is.
	Decisions []PolicyDecision
	// Allowed reports whether every enforced policy allowed the request.
	Allowed bool
	// RetryAfter is, for a denied request, the longest RetryAfter among the policies that
	// denied it; 0 when Allowed.
	RetryAfter time.Duration
}

// Violated returns the names of the enforced policies that denied the request.
func (res *Result) Violated() []string {
	var names []string
	for i := range res.Decisions {
		if res.Decisions[i].blocks {
			names = append(names, res.Decisions[i].Policy)
		}
	}
	return names
}

// PolicyDecision is one policy's decision for one request.
type PolicyDecision struct {
	// Policy is the policy's name.
	Policy string
	// Identity is who was limited (for API keys, the key's MAC).
	Identity keys.Identity
	// Route is the policy's route pattern, "" for every route.
	Route string
	// Tier is the tier whose limit applied, "" when Policy.Limit or an override did.
	Tier string
	// Key is the store key: keys.Bound(keys.Of(Policy, Identity, Route, Tier).String()).
	Key string
	// Shadow reports whether the policy only measures.
	Shadow bool
	// Decision is the store's decision. In an atomic denial, a policy that would have
	// passed on its own has Allowed false and RetryAfter 0.
	sluice.Decision

	partitionKey bool
	settle       *Settle
	blocks       bool // the policy denied the request (evaluator.Item.Blocks)
}

// Middleware is HTTP middleware that rate-limits requests. Create it with New; it is safe
// for concurrent use.
type Middleware struct {
	cfg      Config
	policies []Policy
	sets     []routeSet // one per Policy.RouteSet that has Routes
	unavail  string
	items    policyItems
	tracer   span.Tracer
}

// New checks cfg and returns its Middleware. Every policy needs a unique, printable
// name, at least one limit, valid limits, and a route pattern that http.ServeMux accepts
// and that does not conflict with another policy's route.
func New(cfg Config) (*Middleware, error) {
	if cfg.Limiter == nil {
		return nil, errors.New("httplimit: Config.Limiter is nil")
	}
	m := &Middleware{cfg: cfg, tracer: span.NewTracer(cfg.TracerProvider)}
	if m.cfg.Limited == nil {
		m.cfg.Limited = DefaultLimited
	}
	if m.cfg.Unavailable == nil {
		m.cfg.Unavailable = DefaultUnavailable
	}
	if m.cfg.Error == nil {
		m.cfg.Error = DefaultError
	}
	if m.cfg.Shed == nil {
		m.cfg.Shed = DefaultShed
	}
	ra := cmp.Or(max(cfg.UnavailableRetryAfter, 0), DefaultUnavailableRetryAfter)
	m.unavail = fmt.Sprint(ratelimitheader.Seconds(ra))
	names := map[string]bool{}
	for i, p := range cfg.Policies {
		if err := checkPolicy(&p, names); err != nil {
			return nil, fmt.Errorf("httplimit: policy %d (%q): %w", i, p.Name, err)
		}
		if p.Key == nil {
			p.Key = ByIP(nil)
		}
		// Own the maps, so a caller that reuses them cannot race with requests.
		p.Tiers, p.Overrides = maps.Clone(p.Tiers), maps.Clone(p.Overrides)
		if p.Route != "" {
			p.set = slices.IndexFunc(m.sets, func(s routeSet) bool { return s.name == p.RouteSet })
			if p.set < 0 {
				p.set = len(m.sets)
				m.sets = append(m.sets, routeSet{name: p.RouteSet, mux: http.NewServeMux()})
			}
			if err := m.sets[p.set].add(p.Route); err != nil {
				return nil, fmt.Errorf("httplimit: policy %d (%q): %w", i, p.Name, err)
			}
		}
		m.policies = append(m.policies, p)
	}
	return m, nil
}

func checkPolicy(p *Policy, names map[string]bool) error {
	switch {
	case p.Name == "":
		return errors.New("empty name")
	case names[p.Name]:
		return errors.New("duplicate name")
	case !sfv.ValidString(p.Name):
		return errors.New("name is not a structured-field String (printable ASCII only)")
	case p.Limit == (sluice.Limit{}) && len(p.Tiers) == 0 && len(p.Overrides) == 0:
		return fmt.Errorf("%w: no Limit, Tiers or Overrides", sluice.ErrInvalidLimit)
	}
	names[p.Name] = true
	if p.Limit != (sluice.Limit{}) {
		if err := p.Limit.Validate(); err != nil {
			return fmt.Errorf("Limit: %w", err)
		}
	}
	for tier, l := range p.Tiers {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("tier %q: %w", tier, err)
		}
	}
	for id, l := range p.Overrides {
		if err := l.Validate(); err != nil {
			return fmt.Errorf("override for %v: %w", id, err)
		}
	}
	if s := p.Settle; s != nil {
		if s.CostHeader == "" {
			return errors.New("Settle: no CostHeader")
		}
		for _, l := range append([]sluice.Limit{p.Limit}, slices.Collect(maps.Values(p.Tiers))...) {
			if l != (sluice.Limit{}) {
				if err := store.CheckSettleTTL(l, s.TTL); err != nil || s.TTL <= 0 {
					return fmt.Errorf("Settle: %w (TTL %v)", cmp.Or(err, sluice.ErrInvalidLimit), s.TTL)
				}
			}
		}
	}
	return nil
}

// routeSet is the Routes of one Policy.RouteSet, in one ServeMux: a request matches the
// most specific of them only.
type routeSet struct {
	name   string
	mux    *http.ServeMux
	routes []string // the patterns, in mux as their indexes (route.Register)
}

func (s *routeSet) add(pattern string) error {
	if slices.Contains(s.routes, pattern) {
		return nil // several policies may limit one pattern
	}
	if err := route.Register(s.mux, pattern, len(s.routes)); err != nil {
		return err
	}
	s.routes = append(s.routes, pattern)
	return nil
}

// match returns the pattern of s that r matches, or "" (package internal/route: r's path
// is normalised first).
func (s *routeSet) match(r *http.Request) string {
	if i, ok := route.Match(s.mux, r); ok {
		return s.routes[i]
	}
	return ""
}

// Handler returns next wrapped by the middleware; its signature is that of the usual
// func(http.Handler) http.Handler middleware (chi's Use, alice, ...).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, sp := m.tracer.Start(m.tracer.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), spanName)
		if m.cfg.Trust != nil {
			ctx = withVerdict(ctx, m.cfg.Trust, r)
		}
		if sp.On() || m.cfg.Trust != nil {
			r = r.WithContext(ctx)
		}
		var few [4]string
		routes := few[:0] // the pattern r matches in each route set
		for i := range m.sets {
			routes = append(routes, m.sets[i].match(r))
		}
		var permit *overload.Permit
		if m.cfg.Overload != nil {
			if permit = m.admit(w, r, routes, sp); permit == nil {
				return
			}
		}
		res, err := m.decide(r, routes, sp)
		if err != nil || !res.Allowed {
			if permit != nil {
				permit.Drop()
			}
		}
		if errors.Is(err, ErrEstimate) {
			blank(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if err != nil {
			m.fail(w, r, err)
			return
		}
		refusal := ratelimitheader.Refusal{Refused: !res.Allowed, Wait: res.RetryAfter}
		writeHeaders(w.Header(), &m.items, m.advertised(res.Decisions), refusal, m.cfg.LegacyHeaders)
		if !res.Allowed {
			m.cfg.Limited(w, r, res)
			return
		}
		if res.holds() {
			defer m.finish(r, w, res)
		}
		serve(next, w, r, permit)
	})
}

// holds reports whether a decision of res took a lease or reserved an estimated cost.
func (res *Result) holds() bool {
	for i := range res.Decisions {
		if d := &res.Decisions[i]; d.Lease != 0 || d.Reservation != 0 {
			return true
		}
	}
	return false
}

// finishTimeout bounds the store calls that settle a request's reservations and release
// its leases. A reservation not settled stands at its estimate; a lease not released
// expires by its TTL.
const finishTimeout = 2 * time.Second

// finish settles the reservations of res at the cost the handler reported in w's header
// or trailers, and gives back its leases, once next has returned or panicked, even when
// the client has gone away.
func (m *Middleware) finish(r *http.Request, w http.ResponseWriter, res *Result) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), finishTimeout)
	defer cancel()
	log := m.cfg.Logger
	for i := range res.Decisions {
		d := &res.Decisions[i]
		if d.Reservation != 0 && d.settle != nil {
			if c, ok := d.settle.actual(w.Header()); ok {
				_, err := m.cfg.Limiter.Settle(ctx, d.Key, d.Limit, d.Reservation, c)
				if err != nil && log != nil {
					log.LogAttrs(ctx, slog.LevelWarn, "rate limit cost not settled; the estimate stands",
						slog.String("policy", d.Policy), slog.String("key", d.Key), slog.Int64("cost", c),
						slog.String("error", err.Error()))
				}
			}
		}
		if d.Lease == 0 {
			continue
		}
		held, err := m.cfg.Limiter.Release(ctx, d.Key, d.Limit, d.Lease)
		switch {
		case log == nil:
		case err != nil:
			log.LogAttrs(ctx, slog.LevelWarn, "rate limit lease not released; it expires by its TTL",
				slog.String("policy", d.Policy), slog.String("key", d.Key), slog.Duration("lease_ttl", d.Limit.Lease),
				slog.String("error", err.Error()))
		case !held:
			log.LogAttrs(ctx, slog.LevelInfo, "rate limit lease had expired before the request ended",
				slog.String("policy", d.Policy), slog.String("key", d.Key), slog.Duration("lease_ttl", d.Limit.Lease))
		}
	}
}

// advertised returns the decisions the headers describe: all of them with
// Config.ShadowHeaders, else the enforced ones (a client obeying a shadow policy's r=0
// would stop sending although nothing is enforced).
func (m *Middleware) advertised(ds []PolicyDecision) []PolicyDecision {
	shadow := func(d PolicyDecision) bool { return d.Shadow }
	if m.cfg.ShadowHeaders || !slices.ContainsFunc(ds, shadow) {
		return ds
	}
	return slices.DeleteFunc(slices.Clone(ds), shadow)
}

// fail answers a request that could not be decided: Config.Error for bad input, else
// Config.Unavailable with Retry-After.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, err error) {
	bad := errors.Is(err, ErrIdentify) || store.IsBadInput(err)
	if m.cfg.Logger != nil {
		level := slog.LevelError
		if store.IsBadInput(err) {
			level = slog.LevelWarn // a request's input, not a failure of the service
		}
		if errors.Is(err, context.Canceled) {
			level = slog.LevelDebug // the client went away
		}
		m.cfg.Logger.LogAttrs(r.Context(), level, "rate limit not decided",
			slog.String("error", err.Error()), slog.Bool("bad_input", bad),
			slog.String("method", r.Method), slog.String("path", r.URL.Path))
	}
	if bad {
		m.cfg.Error(w, r, err)
		return
	}
	w.Header().Set(HeaderRetryAfter, m.unavail)
	m.cfg.Unavailable(w, r, err)
}

// pending is one applying policy of a request, as the evaluator decides it.
type pending struct {
	evaluator.Item
	d PolicyDecision
}

// pendings is a request's pending items, reused through pendingPool; maxPooledPending
// bounds what goes back.
type pendings struct{ items []pending }

var pendingPool = sync.Pool{New: func() any { return new(pendings) }}

const maxPooledPending = 64

// newResult returns a Result with room for n decisions: for one decision, the usual
// case, in one allocation with it.
func newResult(n int) *Result {
	if n == 1 {
		r := new(struct {
			res Result
			ds  [1]PolicyDecision
		})
		r.res.Decisions = r.ds[:0:1]
		return &r.res
	}
	return &Result{Decisions: make([]PolicyDecision, 0, n)}
}

func itemOf(p *pending) *evaluator.Item { return &p.Item }

// spanName is the name of a request's decision span.
const spanName = "sluice.httplimit"

// decide applies every policy that matches r (routes[i] is the pattern r matches in route
// set i), and ends sp with the outcome. See the package doc for the semantics.
func (m *Middleware) decide(r *http.Request, routes []string, sp span.Span) (_ *Result, err error) {
	ctx := r.Context()
	var tier string
	if m.cfg.Tier != nil {
		tier = m.cfg.Tier(r)
	}
	pb := pendingPool.Get().(*pendings)
	items := pb.items[:0]
	defer func() {
		clear(items) // drop the request's strings
		if cap(items) <= maxPooledPending {
			pb.items = items[:0]
			pendingPool.Put(pb)
		}
	}()
	var out evaluator.Outcome
	defer func() {
		if sp.On() {
			names := make([]string, 0, len(items))
			for i := range items {
				names = append(names, items[i].Policy)
			}
			sp.End(span.KeyPolicy.String(strings.Join(names, ",")), out, err)
		}
	}()
	for i := range m.policies {
		p := &m.policies[i]
		if p.Route != "" && p.Route != routes[p.set] {
			continue
		}
		id, err := p.Key(r)
		if err != nil {
			return nil, fmt.Errorf("%w: policy %q: %w", ErrIdentify, p.Name, err)
		}
		if id.IsZero() {
			continue
		}
		limit, usedTier, ok := p.limitFor(id, tier)
		if !ok {
			continue
		}
		key := keys.Of(p.Name, id, p.Route, usedTier).String()
		n, ttl := int64(1), time.Duration(0)
		if p.Settle != nil {
			if n, err = p.Settle.estimate(r, limit); err != nil {
				return nil, err
			}
			ttl = p.Settle.TTL
		}
		items = append(items, pending{
			Item: evaluator.Item{Request: sluice.Request{
				Key: key, Limit: limit, N: n, Policy: p.Name, Shadow: p.Shadow, Failure: p.Failure, SettleTTL: ttl,
			}},
			d: PolicyDecision{
				Policy:       p.Name,
				Identity:     id,
				Route:        p.Route,
				Tier:         usedTier,
				Key:          key,
				Shadow:       p.Shadow,
				Decision:     sluice.Decision{Limit: limit},
				partitionKey: p.PartitionKey,
				settle:       p.Settle,
			},
		})
	}
	out, err = evaluator.Evaluate(ctx, m.cfg.Limiter, items, itemOf)
	if err != nil {
		return nil, err
	}
	if m.cfg.Logger != nil {
		for _, e := range out.ShadowErrors {
			attrs := make([]slog.Attr, 0, 3)
			if se, ok := errors.AsType[*evaluator.ShadowError](e); ok && se.Index >= 0 && se.Index < len(items) {
				d := &items[se.Index].d
				attrs = append(attrs, slog.String("policy", d.Policy), slog.String("key", d.Key))
			}
			attrs = append(attrs, slog.String("error", e.Error()))
			m.cfg.Logger.LogAttrs(ctx, slog.LevelError, "shadow rate limit not decided", attrs...)
		}
	}
	res := newResult(len(items))
	res.Allowed, res.RetryAfter = out.Allowed, out.RetryAfter
	for i := range items {
		it := &items[i]
		if !it.Decided {
			continue
		}
		it.decided()
		res.Decisions = append(res.Decisions, it.d)
	}
	m.log(ctx, r, res)
	return res, nil
}

// decided fills p's PolicyDecision from what Evaluate decided of its item: Key as Evaluate
// bounded it, and the Decision, whose zero Limit Evaluate filled.
func (p *pending) decided() { p.d.Key, p.d.Decision, p.d.blocks = p.Key, p.Decision, p.Blocks() }

func (m *Middleware) log(ctx context.Context, r *http.Request, res *Result) {
	l := m.cfg.Logger
	if l == nil {
		return
	}
	for i := range res.Decisions {
		d := &res.Decisions[i]
		level, msg := slog.LevelDebug, "rate limit allowed"
		switch {
		case d.Shadow && !d.Allowed:
			level, msg = slog.LevelWarn, "rate limit would deny (shadow)"
		case d.blocks:
			level, msg = slog.LevelInfo, "rate limit denied"
		case !d.Allowed:
			level, msg = slog.LevelDebug, "rate limit unspent (denied by another policy)"
		}
		if !l.Enabled(ctx, level) {
			continue
		}
		l.LogAttrs(ctx, level, msg,
			slog.String("policy", d.Policy),
			slog.String("identity", keys.Bound(d.Identity.String())),
			slog.String("route", d.Route),
			slog.String("tier", d.Tier),
			slog.String("key", d.Key),
			slog.String("limit", d.Limit.String()),
			slog.Bool("allowed", d.Allowed),
			slog.Bool("shadow", d.Shadow),
			slog.Int64("remaining", d.Remaining),
			logattr.Millis("retry_after_ms", d.RetryAfter),
			logattr.Millis("reset_after_ms", d.ResetAfter),
			slog.String("decided_by", d.Path.String()),
			slog.String("method", r.Method),
		)
	}
}
