package server

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/span"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/observe"
	"github.com/sluicehq/sluice/overload"
	"github.com/sluicehq/sluice/override"
)

// ProxyOptions configures a Proxy. Limiter and Upstream are required.
type ProxyOptions struct {
	// Limiter decides (see Options.Limiter).
	Limiter sluice.Limiter
	// Upstream is where allowed requests are sent.
	Upstream *url.URL
	// Watcher or Config is the configuration whose sluice policies apply, as in Options.
	Watcher *config.Watcher
	Config  *config.Config
	// LegacyHeaders adds X-RateLimit-Limit, -Remaining and -Reset.
	LegacyHeaders bool
	// ShadowHeaders puts shadow policies in the headers too (httplimit.Config).
	ShadowHeaders bool
	// Logger receives the middleware's decision records and rebuild errors. Nil discards.
	Logger *slog.Logger
	// FailureMode, when set, overrides the configuration's store.failure_mode, as
	// Options.FailureMode does.
	FailureMode sluice.FailureMode
	// Transport sends requests upstream; nil means NewUpstreamTransport(0, false).
	Transport http.RoundTripper
	// Overrides are the limits set at run time through a server's /v1/overrides
	// (stack.Stack's Overrides), applied ahead of the configuration's; refreshed every
	// OverrideRefresh as requests come. Nil applies none.
	Overrides       override.Store
	OverrideRefresh time.Duration
	// TracerProvider, when set, traces each request's decision (httplimit.Config) and
	// sends the decision span's W3C traceparent upstream. Nil traces nothing, and the
	// client's traceparent, if any, goes upstream unchanged.
	TracerProvider trace.TracerProvider
	// Registry, when set, gets the overload limit's metrics (observe.OverloadMetrics).
	Registry prometheus.Registerer
}

// Proxy is a reverse proxy that applies the configuration's sluice policies with the
// httplimit middleware in front of an upstream (see PoliciesFor), under the store keys
// the JSON API uses.
//
// With an overload block in the configuration, one overload.Limiter bounds the requests
// in flight to the upstream (httplimit.Config.Overload): a request's criticality is the
// block's criticality_header from a trusted proxy, else the highest criticality of the
// policies and routes it matches, else the block's default_criticality.
//
// A reloaded configuration rebuilds the middleware for the next request; counters live
// in the store and survive. An overload block that sets the same limit as the previous
// one (config.Overload.SameLimit) keeps its limiter, with its learned limit and the
// requests in flight; a block whose limit settings changed starts a new limiter from its
// initial limit (requests admitted by the old one end on it), and a removed block
// removes the limit. A configuration PoliciesFor refuses is logged, and the previous
// middleware stays in force.
type Proxy struct {
	opts  ProxyOptions
	proxy *httputil.ReverseProxy

	hashers *hashers

	// cur is the middleware of the configuration it was built for; mu serializes rebuilds.
	mu  sync.Mutex
	cur atomic.Pointer[builtHandler]

	ovr *overrideCache // nil without ProxyOptions.Overrides

	overloadMetrics *observe.OverloadMetrics // nil without ProxyOptions.Registry
}

// NewProxy returns a Proxy. The configuration in force must be one PoliciesFor accepts.
func NewProxy(opts ProxyOptions) (*Proxy, error) {
	if opts.Limiter == nil || opts.Upstream == nil {
		return nil, errors.New("server: ProxyOptions.Limiter and Upstream are required")
	}
	opts.Config = cmp.Or(opts.Config, config.Default())
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	if opts.Transport == nil {
		opts.Transport = NewUpstreamTransport(0, false)
	}
	up := opts.Upstream
	p := &Proxy{opts: opts, hashers: newHashers(opts.Logger)}
	if opts.Registry != nil {
		m, err := observe.NewOverloadMetrics(opts.Registry, p.overloadStats)
		if err != nil {
			return nil, err
		}
		p.overloadMetrics = m
	}
	tracer := span.NewTracer(opts.TracerProvider)
	if opts.Overrides != nil {
		p.ovr = newOverrideCache(opts.Overrides, opts.OverrideRefresh, time.Now, opts.Logger, func() {})
	}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.SetXForwarded()
			tracer.Inject(pr.In.Context(), propagation.HeaderCarrier(pr.Out.Header))
		},
		Transport:  opts.Transport,
		BufferPool: copyBuffers{},
		ErrorLog:   slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	if _, err := p.handler(); err != nil {
		return nil, err
	}
	return p, nil
}

// copyBufferSize is httputil.ReverseProxy's own copy buffer size.
const copyBufferSize = 32 << 10

// copyBuffers is the httputil.BufferPool of a Proxy.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

func (copyBuffers) Get() []byte { return copyBufferPool.Get().(*[copyBufferSize]byte)[:] }

func (copyBuffers) Put(b []byte) {
	if len(b) == copyBufferSize {
		copyBufferPool.Put((*[copyBufferSize]byte)(b))
	}
}

// DefaultUpstreamIdleConns is the size of the pool of idle upstream connections unless
// NewUpstreamTransport is told otherwise.
const DefaultUpstreamIdleConns = 256

// NewUpstreamTransport returns the transport a Proxy sends requests upstream with: it
// keeps up to idle connections to the upstream open between requests
// (DefaultUpstreamIdleConns when idle ≤ 0); with h2, it speaks HTTP/2 (by ALPN over TLS,
// prior-knowledge cleartext for http upstreams). Other settings are
// http.DefaultTransport's.
func NewUpstreamTransport(idle int, h2 bool) *http.Transport {
	idle = orPositive(idle, DefaultUpstreamIdleConns)
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = idle
	t.MaxIdleConnsPerHost = idle // the default, 2, closes all but two after every burst
	if h2 {
		t.Protocols = new(http.Protocols)
		t.Protocols.SetHTTP2(true)
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	return t
}

// builtHandler is the middleware built for one configuration (h nil when the first
// configuration could not be applied), and the overload limit it applies (nil: none).
type builtHandler struct {
	cfg *config.Config
	h   http.Handler
	ovl *overloadLimit
}

// overloadLimit is the limiter of one overload block.
type overloadLimit struct {
	cfg *config.Overload
	lim *overload.Limiter
}

// overloadStats is the Stats of the overload limit in force, for the metrics.
func (p *Proxy) overloadStats() (overload.Stats, bool) {
	if b := p.cur.Load(); b != nil && b.ovl != nil {
		return b.ovl.lim.Stats(), true
	}
	return overload.Stats{}, false
}

// handler returns the middleware for the configuration in force, rebuilding it after a
// reload.
func (p *Proxy) handler() (http.Handler, error) {
	cfg := configOf(p.opts.Watcher, p.opts.Config)
	if b := p.cur.Load(); b != nil && b.cfg == cfg && b.h != nil {
		return b.h, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.cur.Load()
	if prev != nil && prev.cfg == cfg {
		return prev.h, nil
	}
	var prevOvl *overloadLimit
	if prev != nil {
		prevOvl = prev.ovl
	}
	mw, ovl, err := p.build(cfg, prevOvl)
	if err != nil {
		if prev == nil || prev.h == nil {
			p.cur.Store(&builtHandler{cfg: cfg})
			return nil, err
		}
		p.opts.Logger.Error("proxy keeps its previous policies: the new configuration cannot be applied",
			slog.String("error", err.Error()))
		// Report once per configuration.
		p.cur.Store(&builtHandler{cfg: cfg, h: prev.h, ovl: prev.ovl})
		return prev.h, nil
	}
	h := mw.Handler(p.proxy)
	p.cur.Store(&builtHandler{cfg: cfg, h: h, ovl: ovl})
	return h, nil
}

// build returns the middleware of cfg and its overload limit: prev's limiter when cfg's
// overload block sets the same limit, a new one when it does not, nil without a block.
func (p *Proxy) build(cfg *config.Config, prev *overloadLimit,
) (*httplimit.Middleware, *overloadLimit, error) {
	h, err := p.hashers.get(cfg)
	if err != nil {
		return nil, nil, err
	}
	ip := clientIP(&cfg.Identity)
	policies, tier, err := policiesFor(cfg, ip, h, p.opts.FailureMode)
	if err != nil {
		return nil, nil, err
	}
	if p.ovr != nil {
		for i := range policies {
			if hp := &policies[i]; hp.Route == "" {
				name := hp.Name
				hp.Lookup = func(id keys.Identity) (sluice.Limit, bool) {
					if o, ok := p.ovr.lookup(name, id.ID); ok {
						return o.Limit, true
					}
					return sluice.Limit{}, false
				}
			}
		}
	}
	hc := httplimit.Config{
		Limiter:       p.opts.Limiter,
		Policies:      policies,
		Tier:          tier,
		LegacyHeaders: p.opts.LegacyHeaders,
		ShadowHeaders: p.opts.ShadowHeaders,
		Logger:        p.opts.Logger,
		Trust:         ip,

		TracerProvider: p.opts.TracerProvider,
	}
	var ovl *overloadLimit
	if o := cfg.Overload; o != nil {
		if prev != nil && prev.cfg.SameLimit(o) {
			ovl = &overloadLimit{cfg: o, lim: prev.lim}
		} else {
			lim, err := overload.New(o.Limiter)
			if err != nil {
				return nil, nil, fmt.Errorf("overload: %w", err)
			}
			ovl = &overloadLimit{cfg: o, lim: lim}
		}
		hc.Overload, hc.DefaultCriticality = ovl.lim, o.DefaultCriticality
		if o.CriticalityHeader != "" {
			hc.Criticality = httplimit.TrustedCriticality(ip, o.CriticalityHeader)
		}
		if p.overloadMetrics != nil {
			hc.OnOverload = p.overloadMetrics.Observe
		}
	}
	mw, err := httplimit.New(hc)
	if err != nil {
		return nil, nil, err
	}
	return mw, ovl, nil
}

// ServeHTTP rate-limits r and, when it is allowed, forwards it upstream.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h, _ := p.handler() // never nil after NewProxy
	if p.ovr != nil {
		p.ovr.maybeRefresh()
	}
	h.ServeHTTP(w, r)
}

// PoliciesFor translates the sluice policies of cfg into httplimit policies and the tier
// function of an httplimit.Config: the client IP found as cfg.Identity says, headers
// believed only from trusted proxies, API keys hashed with h, and each policy's failure
// handling resolved as the Server resolves it with def as Options.FailureMode. Each
// policy's routes are one httplimit.Policy.RouteSet, named RouteLimitName(policy,
// pattern). httplimit has one tier function, so policies with tiers must all read the
// same header; other configurations are refused.
func PoliciesFor(cfg *config.Config, h *keys.Hasher, def sluice.FailureMode) ([]httplimit.Policy, func(*http.Request) string, error) {
	return policiesFor(cfg, clientIP(&cfg.Identity), h, def)
}

// policiesFor is PoliciesFor with the client IP's reading ip, which every header reading
// of the policies is built on (so that httplimit.Config.Trust, set to ip, tests each
// request's peer once for all of them).
func policiesFor(cfg *config.Config, ip *keys.ClientIP, h *keys.Hasher, def sluice.FailureMode,
) ([]httplimit.Policy, func(*http.Request) string, error) {
	var tierHeader, tierPolicy string
	var out []httplimit.Policy
	for _, p := range cfg.Policies {
		var key httplimit.KeyFunc
		var kind keys.Kind
		switch p.Key.Type {
		case config.KeyIP:
			key, kind = httplimit.ByIP(ip), keys.IP
		case config.KeyUser:
			key, kind = httplimit.ByTrustedHeader(ip, p.Key.Header, keys.User), keys.User
		case config.KeyAPIKey:
			key, kind = httplimit.ByAPIKey(h, httplimit.Header(p.Key.Header)), keys.APIKey
		default:
			return nil, nil, fmt.Errorf("policy %q: unknown key type %v", p.Name, p.Key.Type)
		}
		limit, _ := p.LimitFor("", "")
		failure := cfg.Failure(p, def)
		hp := httplimit.Policy{Name: p.Name, Limit: limit, Key: key, Shadow: p.Shadow,
			Failure: failure, Settle: settleOf(ip, p.Settle, 0), Criticality: p.Criticality}
		if len(p.Tiers) > 0 && p.TierHeader != "" {
			canon := http.CanonicalHeaderKey
			if tierHeader != "" && canon(tierHeader) != canon(p.TierHeader) {
				return nil, nil, fmt.Errorf("policies %q and %q read tiers from different headers (%s, %s); the proxy supports one tier header",
					tierPolicy, p.Name, tierHeader, p.TierHeader)
			}
			tierHeader, tierPolicy = p.TierHeader, p.Name
			hp.Tiers = make(map[string]sluice.Limit, len(p.Tiers))
			for _, t := range p.Tiers {
				hp.Tiers[t.Name] = t.Limit
			}
		}
		if len(p.Overrides)+len(p.IdentityTiers) > 0 {
			// An identity's tier is an override by the tier's limit, as in LimitFor.
			hp.Overrides = make(map[keys.Identity]sluice.Limit, len(p.Overrides)+len(p.IdentityTiers))
			for _, it := range p.IdentityTiers {
				hp.Overrides[keys.Identity{Kind: kind, ID: it.ID}], _ = p.Tier(it.Tier)
			}
			for _, o := range p.Overrides {
				hp.Overrides[keys.Identity{Kind: kind, ID: o.ID}] = o.Limit
			}
		}
		out = append(out, hp)
		for _, rt := range p.Routes {
			out = append(out, httplimit.Policy{
				Name: RouteLimitName(p.Name, rt.Pattern), Route: rt.Pattern, RouteSet: p.Name,
				Limit: rt.Limit, Key: key, Shadow: p.Shadow, Failure: failure, Settle: settleOf(ip, p.Settle, rt.Estimate),
				Criticality: rt.Criticality,
			})
		}
	}
	var tier func(*http.Request) string
	if tierHeader != "" {
		tier = httplimit.TrustedHeader(ip, tierHeader)
	}
	return out, tier, nil
}

// settleOf is the middleware's Settle for a policy's settle block (nil for none), with a
// route's fixed estimate when it has one.
func settleOf(ip *keys.ClientIP, s *config.Settle, estimate int64) *httplimit.Settle {
	if s == nil {
		return nil
	}
	return &httplimit.Settle{TTL: s.TTL, EstimateFrom: httplimit.TrustedHeader(ip, s.EstimateHeader),
		CostHeader: s.CostHeader, Estimate: cmp.Or(estimate, s.Estimate)}
}

// clientIP is how the configuration finds and aggregates a client's address, for every
// identity made from one.
func clientIP(id *config.Identity) *keys.ClientIP {
	return &keys.ClientIP{TrustedProxies: id.TrustedProxies, Header: id.ClientIPHeader, IPv6Prefix: id.IPv6Prefix}
}
