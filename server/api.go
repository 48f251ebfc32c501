package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/internal/evaluator"
	"github.com/sluicehq/sluice/internal/logattr"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/store"
)

// Subject is the sluice policy a CheckRequest, ReleaseRequest or SettleRequest names,
// and what it limits under it.
type Subject struct {
	// Policy is the name of a sluice policy; Key the identity it limits: a client IP (IPv6
	// aggregated to the configured prefix), a user ID, or a raw API key (hashed at once,
	// never stored or logged), as the policy's key type says.
	Policy string `json:"policy,omitempty"`
	Key    string `json:"key,omitempty"`
	// Tier is the identity's tier; empty or unknown means the policy's default tier.
	Tier string `json:"tier,omitempty"`
	// Method, Path and Host describe the request being limited, when the policy's route
	// limits should apply too (see config.Policy.Route).
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Host   string `json:"host,omitempty"`
}

// CheckRequest is the body of POST /v1/check, /v1/peek and /v1/reset. It names either a
// sluice policy (Subject) or an envoyproxy/ratelimit domain and descriptors.
type CheckRequest struct {
	Subject

	Domain      string       `json:"domain,omitempty"`
	Descriptors []Descriptor `json:"descriptors,omitempty"`

	// Cost is how many units the request spends (default 1; 0 only looks).
	Cost *int64 `json:"cost,omitempty"`
}

// Descriptor is one Envoy rate limit descriptor in a CheckRequest.
type Descriptor struct {
	Entries []Entry `json:"entries"`
	// Limit overrides the configured limit, as RateLimitDescriptor.limit does.
	Limit *LimitOverride `json:"limit,omitempty"`
	// Cost, when set, replaces the request's Cost for this descriptor (hits_addend).
	Cost *int64 `json:"cost,omitempty"`
}

// Entry is one key/value pair of a Descriptor.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// LimitOverride is a per-descriptor limit: RequestsPerUnit per Unit (second, minute,
// hour, day, week, month, year).
type LimitOverride struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
}

// CheckResponse is the answer of /v1/check and /v1/peek.
type CheckResponse struct {
	// Allowed reports whether every enforced limit allowed the request.
	Allowed bool `json:"allowed"`
	// RetryAfterMs is, when denied, the time until it would pass, rounded up.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// Limits has one entry per limit that applied (policy or route) or per descriptor
	// match, in order.
	Limits []LimitStatus `json:"limits"`
}

// LimitStatus is one limit's part of a CheckResponse.
type LimitStatus struct {
	// Name is the policy's name (a route limit's is "<policy> <pattern>"), or the
	// rate_limit name, else the full key, of an Envoy rule.
	Name string `json:"name,omitempty"`
	// Status is "limited", "blocked" (requests_per_unit 0), "unlimited", "replaced" or
	// "no_match".
	Status string `json:"status"`
	// OverLimit reports whether this limit is exceeded (in shadow mode too).
	OverLimit bool `json:"over_limit"`
	// Shadow limits (a policy's shadow, a rule's shadow_mode or quota_mode) never deny.
	Shadow bool `json:"shadow,omitempty"`
	// Source says where a policy's limit came from, by precedence: "api_override"
	// ("api_override:<pattern>" for a pattern), "override", "tier:<name>", "policy"; or
	// "route".
	Source string `json:"source,omitempty"`
	Route  string `json:"route,omitempty"`

	Algorithm string `json:"algorithm,omitempty"`
	Rate      int64  `json:"rate,omitempty"`
	// Period is a Go duration, or for a calendar quota its unit ("calendar_month"), with
	// Zone and AnchorDay.
	Period string `json:"period,omitempty"`
	Burst  int64  `json:"burst,omitempty"`
	// LeaseTTL is a concurrency limit's lease TTL, and Lease the lease an allowed check
	// took, for POST /v1/release (else it expires after LeaseTTL).
	LeaseTTL string `json:"lease_ttl,omitempty"`
	Lease    string `json:"lease,omitempty"`
	// Reservation is what an allowed check of a policy that settles costs reserved, for
	// POST /v1/settle (else the cost checked stands after the settle TTL).
	Reservation string `json:"reservation,omitempty"`
	Zone        string `json:"zone,omitempty"`
	AnchorDay   int    `json:"anchor_day,omitempty"`
	// WindowSeconds is a calendar quota's period length (RateLimit-Policy's w).
	WindowSeconds int64 `json:"window_seconds,omitempty"`

	Remaining    int64 `json:"remaining"`
	ResetAfterMs int64 `json:"reset_after_ms"`
	RetryAfterMs int64 `json:"retry_after_ms"`
	// DecidedBy is "store", or the failure mode that decided ("open", "closed", "local").
	DecidedBy string `json:"decided_by,omitempty"`
}

// ReleaseRequest is the body of POST /v1/release: the Subject a check named and the lease
// its answer carried.
type ReleaseRequest struct {
	Subject
	Lease string `json:"lease"`
}

// ReleaseResponse is the answer of /v1/release. Released is false, with status 200, for
// a lease expired, released already or never given.
type ReleaseResponse struct {
	Released bool `json:"released"`
	// Limit names the limit whose lease was released.
	Limit string `json:"limit,omitempty"`
}

// SettleRequest is the body of POST /v1/settle: the Subject a check named, the
// reservation its answer carried, and the actual cost.
type SettleRequest struct {
	Subject
	Reservation string `json:"reservation"`
	Cost        *int64 `json:"cost"`
}

// SettleResponse is the answer of /v1/settle: the limit settled, and its state after.
type SettleResponse struct {
	Settled bool        `json:"settled"`
	Limit   LimitStatus `json:"limit"`
}

// ResetResponse is the answer of /v1/reset: the limits whose state was forgotten.
type ResetResponse struct {
	Reset []string `json:"reset"`
}

// maxEnvelope is what a JSON body may hold beyond request_limits.max_bytes.
const maxEnvelope = 64 << 10

// Handler returns the HTTP API: the JSON endpoints under /v1/, /healthz, /readyz and
// /metrics, as docs/service.md lists them.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/check", s.observed(apiCheck, func(w http.ResponseWriter, r *http.Request) int { return s.serveCheck(w, r, false) }))
	mux.HandleFunc("POST /v1/peek", s.observed(apiPeek, func(w http.ResponseWriter, r *http.Request) int { return s.serveCheck(w, r, true) }))
	mux.HandleFunc("GET /v1/peek", s.observed(apiPeek, s.servePeekQuery))
	mux.HandleFunc("GET /v1/usage", s.observed(apiUsage, s.serveUsage))
	mux.HandleFunc("POST /v1/reset", s.admin(s.observed(apiReset, s.serveReset)))
	mux.HandleFunc("POST /v1/release", s.observed(apiRelease, s.serveRelease))
	mux.HandleFunc("POST /v1/settle", s.observed(apiSettle, s.serveSettle))
	mux.HandleFunc("GET /v1/config", s.adminAPI(s.handleConfig))
	mux.HandleFunc("PUT /v1/overrides/{policy}/{identity...}", s.adminAPI(s.handleOverridePut))
	mux.HandleFunc("GET /v1/overrides/{policy}/{identity...}", s.adminAPI(s.handleOverrideGet))
	mux.HandleFunc("DELETE /v1/overrides/{policy}/{identity...}", s.adminAPI(s.handleOverrideDelete))
	mux.HandleFunc("GET /v1/overrides", s.adminAPI(s.handleOverrideList))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.checkReady(r.Context()); err != nil {
			writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
			return
		}
		writeText(w, http.StatusOK, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{Registry: s.opts.Registry}))
	return mux
}

func writeText(w http.ResponseWriter, status int, msg string) {
	writeBody(w, status, "text/plain; charset=utf-8", []byte(msg+"\n"))
}

// writeBody answers status with body, a whole document of type ctype.
func writeBody(w http.ResponseWriter, status int, ctype string, body []byte) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(body) // copies: a ResponseWriter must not keep the slice
}

// apiError is an error with the HTTP status it is answered with.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

// writeError answers err as an RFC 9457 problem: its status for an apiError, 400 for bad
// input, else 503 with Retry-After (a store that is down, failing closed or failing).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) int {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		writeProblem(w, r, ae.status, ae.msg)
		return codeInvalid
	case store.IsBadInput(err):
		writeProblem(w, r, http.StatusBadRequest, err.Error())
		return codeInvalid
	}
	w.Header().Set("Retry-After", "1")
	if !errors.Is(err, sluice.ErrStoreUnavailable) {
		s.metrics.storeErrors.Inc()
		s.log.LogAttrs(r.Context(), slog.LevelError, "rate limit not decided",
			slog.String("path", r.URL.Path), slog.String("error", err.Error()))
	}
	writeProblem(w, r, http.StatusServiceUnavailable,
		"The rate limiter is unavailable; retry after 1 second.")
	return codeUnavailable
}

// writeProblem answers status with an RFC 9457 problem of type about:blank.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, detail string) {
	p := &httplimit.Problem{Type: httplimit.ProblemBlank, Status: status,
		Title: http.StatusText(status), Detail: detail}
	p.ServeHTTP(w, r)
}

// decodeBody reads a JSON body of at most limit bytes into v, as decodeJSON does; any
// fault is a bad request, which says want when given (unless the body is not Unicode).
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any, want string) error {
	err := decodeJSON(w, r, limit, v)
	switch {
	case err == nil:
		return nil
	case want != "" && !errors.Is(err, errNotUnicode):
		return badRequest("malformed JSON body: want %s", want)
	}
	return badRequest("malformed JSON body: %v", err)
}

func (s *Server) decodeCheck(w http.ResponseWriter, r *http.Request) (*CheckRequest, error) {
	var req CheckRequest
	err := decodeBody(w, r, int64(s.requestLimits(s.config()).MaxBytes)+maxEnvelope, &req, "")
	return &req, err
}

// observed serves an API endpoint with serve, which returns the outcome code, and
// records the code and the time taken in the endpoint's metrics.
func (s *Server) observed(api string, serve func(http.ResponseWriter, *http.Request) int) http.HandlerFunc {
	am := s.metrics.byAPI[api]
	return func(w http.ResponseWriter, r *http.Request) {
		start := monotonic()
		am.observe(serve(w, r), start)
	}
}

func (s *Server) serveCheck(w http.ResponseWriter, r *http.Request, peek bool) int {
	req, err := s.decodeCheck(w, r)
	if err != nil {
		return s.writeError(w, r, err)
	}
	if peek {
		req.Cost = new(int64)
		for i := range req.Descriptors {
			req.Descriptors[i].Cost = nil
		}
	}
	return s.answer(w, r, req, !peek)
}

// servePeekQuery is GET /v1/peek?policy=...&key=...&tier=...&method=...&path=... or
// ?domain=...&descriptor=k1=v1,k2=v2 (one per descriptor; see parseDescriptor).
func (s *Server) servePeekQuery(w http.ResponseWriter, r *http.Request) int {
	req, err := lookQuery(r)
	if err != nil {
		return s.writeError(w, r, err)
	}
	return s.answer(w, r, req, false)
}

// lookQuery reads a request of cost 0 from the query parameters of GET /v1/peek and
// GET /v1/usage.
func lookQuery(r *http.Request) (*CheckRequest, error) {
	q := r.URL.Query()
	req := &CheckRequest{Subject: Subject{
		Policy: q.Get("policy"), Key: q.Get("key"), Tier: q.Get("tier"),
		Method: q.Get("method"), Path: q.Get("path"), Host: q.Get("host"),
	}, Domain: q.Get("domain"), Cost: new(int64)}
	for _, d := range q["descriptor"] {
		desc, err := parseDescriptor(d)
		if err != nil {
			return nil, err
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	return req, nil
}

// UsageResponse is the answer of GET /v1/usage: every limit that applies, as it stands.
type UsageResponse struct {
	Limits []UsageLimit `json:"limits"`
}

// UsageLimit is one limit's usage.
type UsageLimit struct {
	LimitStatus
	// Used is the limit's MaxCost minus Remaining.
	Used int64 `json:"used"`
	// ResetAt is when the limit is whole again (RFC 3339, UTC); for a calendar quota the
	// next period start.
	ResetAt string `json:"reset_at,omitempty"`
}

// serveUsage is GET /v1/usage, with the query parameters of GET /v1/peek, decided at
// cost 0.
func (s *Server) serveUsage(w http.ResponseWriter, r *http.Request) int {
	req, err := lookQuery(r)
	if err != nil {
		return s.writeError(w, r, err)
	}
	cfg := s.config()
	items, sc, err := s.items(cfg, req)
	if err != nil {
		return s.writeError(w, r, err)
	}
	ctx := s.tracer.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	if _, err := s.decide(ctx, opUsage, cfg, sc, items); err != nil {
		return s.writeError(w, r, err)
	}
	now := s.now()
	resp := UsageResponse{Limits: make([]UsageLimit, len(items))}
	for i := range items {
		it := &items[i]
		u := UsageLimit{LimitStatus: limitStatus(it)}
		if it.Decided {
			u.Used = max(0, it.Decision.Limit.MaxCost()-it.Decision.Remaining)
			u.ResetAt = resetAt(now, it.Decision).UTC().Format(time.RFC3339Nano)
		}
		resp.Limits[i] = u
	}
	writeJSON(w, http.StatusOK, resp)
	return codeOK
}

// resetAt is when d's limit is whole again, seen at now; for a calendar quota, the period
// bound nearest now+ResetAfter (they differ by the store's clock's offset).
func resetAt(now time.Time, d sluice.Decision) time.Time {
	at := now.Add(d.ResetAfter)
	if c := d.Limit.Calendar; !c.IsZero() {
		start, end := c.Bounds(at)
		if at.Sub(start) < end.Sub(at) {
			return start
		}
		return end
	}
	return at
}

// parseDescriptor parses "k1=v1,k2=v2", each key and value URL-unescaped.
func parseDescriptor(s string) (Descriptor, error) {
	var d Descriptor
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return d, badRequest("descriptor %q: entry %q is not key=value", s, part)
		}
		ku, err1 := url.QueryUnescape(k)
		vu, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil || ku == "" {
			return d, badRequest("descriptor %q: malformed entry %q", s, part)
		}
		d.Entries = append(d.Entries, Entry{Key: ku, Value: vu})
	}
	return d, nil
}

// answer decides req and writes the CheckResponse: 200 when allowed, 429 when denied
// (only when enforce; a peek always answers 200), with the RateLimit fields.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, req *CheckRequest, enforce bool) int {
	cfg := s.config()
	ctx := s.tracer.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	items, sc, err := s.items(cfg, req)
	if err != nil {
		return s.writeError(w, r, err)
	}
	for i := range items {
		// A cost no wait could allow is an error, not a denial, as in the library.
		if it := &items[i]; it.status == config.Limited && it.N > it.Limit.MaxCost() {
			return s.writeError(w, r, badRequest("cost %d exceeds the %d that %s (%v) can ever allow",
				it.N, it.Limit.MaxCost(), it.name, it.Limit))
		}
	}
	op := opPeek
	if enforce {
		op = opCheck
	}
	out, err := s.decide(ctx, op, cfg, sc, items)
	if err != nil {
		return s.writeError(w, r, err)
	}
	allowed := out.Allowed || s.opts.ShadowMode
	resp := CheckResponse{Allowed: allowed}
	var few [2]LimitStatus // most answers: on the stack
	if len(items) <= len(few) {
		resp.Limits = few[:len(items)]
	} else {
		resp.Limits = make([]LimitStatus, len(items))
	}
	var ra time.Duration
	if !allowed {
		ra = out.RetryAfter
		resp.RetryAfterMs = ceilMillis(ra)
	}
	for i := range items {
		resp.Limits[i] = limitStatus(&items[i])
	}
	refusal := ratelimitheader.Refusal{Refused: enforce && !allowed, Wait: ra}
	rateLimitHeaders(nil, items, refusal, s.opts.ShadowHeaders, w.Header().Set)
	status, code := http.StatusOK, codeOK
	if !allowed {
		code = codeOverLimit
		if enforce {
			status = http.StatusTooManyRequests
		}
		s.logDenied(ctx, req.Policy+req.Domain, items)
	}
	writeCheckResponse(w, status, &resp)
	return code
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, _ := json.Marshal(v)
	writeBody(w, status, "application/json", append(body, '\n'))
}

func limitStatus(it *item) LimitStatus {
	ls := LimitStatus{
		Name:      it.name,
		Status:    it.status.String(),
		OverLimit: it.Over(),
		Shadow:    it.Shadow,
		Source:    it.source,
		Route:     it.route,
	}
	switch it.status {
	case config.Limited:
		l := it.Limit
		if it.Decided && it.Decision.Limit != (sluice.Limit{}) {
			l = it.Decision.Limit
		}
		ls.Algorithm, ls.Rate, ls.Period, ls.Burst = l.Algorithm.String(), l.Rate, l.Period.String(), l.Burst
		if l.Algorithm == sluice.Concurrency {
			ls.Period, ls.LeaseTTL = "", l.Lease.String()
		}
		if c := l.Calendar; !c.IsZero() {
			ls.Period, ls.Zone, ls.AnchorDay = c.Unit.String(), c.Zone.String(), c.Anchor
			ls.WindowSeconds = ratelimitheader.Seconds(it.Decision.Window)
		}
	case config.Blocked:
		ls.Algorithm, ls.Period = sluice.FixedWindow.String(), it.Decision.Limit.Period.String()
	}
	if it.Decided {
		ls.Remaining = it.Decision.Remaining
		ls.ResetAfterMs = ceilMillis(it.Decision.ResetAfter)
		ls.RetryAfterMs = ceilMillis(it.Decision.RetryAfter)
		ls.DecidedBy = it.Decision.Path.String()
		ls.Lease = it.Decision.Lease.String()
		ls.Reservation = it.Decision.Reservation.String()
	}
	return ls
}

// items turns a CheckRequest into the items to decide, and the scope to decide them in
// (the policy's name and failure mode).
func (s *Server) items(cfg *config.Config, req *CheckRequest) ([]item, scope, error) {
	n := int64(1)
	if req.Cost != nil {
		n = *req.Cost
	}
	if n < 0 {
		return nil, scope{}, badRequest("cost must not be negative, got %d", n)
	}
	switch {
	case req.Policy != "" && req.Domain != "":
		return nil, scope{}, badRequest("name a policy or a domain, not both")
	case req.Policy != "":
		return s.policyItems(cfg, req, n)
	case req.Domain != "":
		if len(req.Descriptors) == 0 {
			return nil, scope{}, badRequest("rate limit descriptor list must not be empty")
		}
		descs := make([]config.Descriptor, len(req.Descriptors))
		mults := make([]uint32, len(req.Descriptors))
		hits := make([]int64, len(req.Descriptors))
		for i, d := range req.Descriptors {
			if len(d.Entries) == 0 {
				return nil, scope{}, badRequest("descriptor %d has no entries", i)
			}
			descs[i].Entries = make([]config.Entry, len(d.Entries))
			for j, e := range d.Entries {
				descs[i].Entries[j] = config.Entry{Key: e.Key, Value: e.Value}
			}
			if d.Limit != nil {
				u, err := config.ParseUnit(d.Limit.Unit)
				if err != nil {
					return nil, scope{}, badRequest("descriptor %d: limit: %v", i, err)
				}
				descs[i].Override = &config.LimitOverride{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: u}
			}
			hits[i] = n
			if d.Cost != nil {
				if *d.Cost < 0 {
					return nil, scope{}, badRequest("descriptor %d: cost must not be negative", i)
				}
				hits[i] = *d.Cost
			}
		}
		ed, items, err := s.domainItems(cfg, req.Domain, descs, mults, hits, nil)
		switch {
		case err != nil:
			return nil, scope{}, badRequest("%v", err)
		case ed == nil: // unlike RLS's OK: a caller naming a domain that is not there is mistaken
			return nil, scope{}, unknownName(cfg, "domain", req.Domain)
		}
		return items, scope{name: ed.dom.Name}, nil
	}
	return nil, scope{}, badRequest("name a policy (with key) or a domain (with descriptors)")
}

// unknownName is the 404 for a policy or domain (kind) the configuration does not have,
// naming those it has.
func unknownName(cfg *config.Config, kind, name string) *apiError {
	var names []string
	plural := "policies"
	for _, p := range cfg.Policies {
		names = append(names, p.Name)
	}
	if kind == "domain" {
		names, plural = names[:0], "domains"
		for _, d := range cfg.Domains {
			names = append(names, d.Name)
		}
	}
	return &apiError{http.StatusNotFound, fmt.Sprintf("no %s named %q (the configuration's %s: %s)",
		kind, name, plural, cmp.Or(strings.Join(names, ", "), "none"))}
}

// policyItems are the limits of one identity under the policy req names: the policy's
// limit (an override, the tier's or the policy's own) and the limit of the route the
// request's method and path match, if any, under the store keys httplimit uses.
func (s *Server) policyItems(cfg *config.Config, req *CheckRequest, n int64) ([]item, scope, error) {
	p, ok := cfg.Policy(req.Policy)
	switch {
	case len(req.Descriptors) > 0:
		return nil, scope{}, badRequest("descriptors belong to a domain, not to policy %q", req.Policy)
	case !ok:
		return nil, scope{}, unknownName(cfg, "policy", req.Policy)
	case req.Key == "":
		return nil, scope{}, badRequest("policy %q needs a key (the %s it limits)", p.Name, p.Key.Type)
	}
	id, err := s.identity(cfg, p, req.Key)
	if err != nil {
		return nil, scope{}, err
	}
	limit, source := p.LimitFor(id.ID, req.Tier)
	if o, ok := s.ovr.lookup(p.Name, id.ID); ok {
		limit, source = o.Limit, "api_override"
		if o.Pattern() {
			source += ":" + o.Identity
		}
	}
	keyTier := ""
	if _, mapped := p.IdentityTier(id.ID); !mapped && source == "tier:"+req.Tier && req.Tier != "" {
		// The tier the request named is in the key, not an identity's own (as the proxy).
		keyTier = req.Tier
	}
	var ttl time.Duration
	if p.Settle != nil && n > 0 {
		ttl = p.Settle.TTL
		n = min(n, limit.MaxCost()) // an estimate: the settlement charges the rest
	}
	limited := func(name, source, route, key string, limit sluice.Limit, n int64) item {
		r := sluice.Request{Key: key, Limit: limit, N: n, Shadow: p.Shadow, SettleTTL: ttl}
		return item{Item: evaluator.Item{Request: r}, name: name, status: config.Limited,
			source: source, route: route, identity: id}
	}
	items := []item{limited(p.Name, source, "", keys.Of(p.Name, id, "", keyTier).String(), limit, n)}
	if req.Path != "" || req.Method != "" {
		rt, ok, err := policyRoute(p, req)
		if err != nil {
			return nil, scope{}, err
		}
		if ok {
			name := RouteLimitName(p.Name, rt.Pattern)
			items = append(items, limited(name, "route", rt.Pattern, keys.Of(name, id, rt.Pattern, "").String(),
				rt.Limit, min(n, rt.Limit.MaxCost())))
		}
	}
	return items, scope{p.Name, p}, nil
}

// KeyInfo is one limit of a request, as Keys reports it.
type KeyInfo struct {
	// Name is the limit's name (see LimitStatus.Name); Status its LimitStatus.Status.
	Name, Status string
	// Identity is who a policy's limit limits ("api_key:<MAC>", "user:alice",
	// "ip:203.0.113.7"); empty for Envoy descriptors.
	Identity string
	// Key is the store key the limit is counted under (keys.Bound applied), empty for a
	// limit the store never decides.
	Key string
}

// Keys returns the limits a CheckRequest names and the store keys /v1/check, `sluice
// proxy` and Envoy's RLS count it under with the configuration in force, deciding
// nothing.
func (s *Server) Keys(req *CheckRequest) ([]KeyInfo, error) {
	items, _, err := s.items(s.config(), req)
	if err != nil {
		return nil, err
	}
	out := make([]KeyInfo, len(items))
	for i := range items {
		it := &items[i]
		out[i] = KeyInfo{Name: it.name, Status: it.status.String()}
		if !it.identity.IsZero() {
			out[i].Identity = it.identity.String()
		}
		if it.status == config.Limited {
			out[i].Key = keys.Bound(it.Key)
		}
	}
	return out, nil
}

// RouteLimitName is the name of policy's limit on one route pattern, in headers, JSON
// answers and store keys: "<policy> <pattern>".
func RouteLimitName(policy, pattern string) string { return policy + " " + pattern }

// policyRoute returns the route of p that req's method (GET when empty), host and path
// match, if any.
func policyRoute(p *config.Policy, req *CheckRequest) (config.Route, bool, error) {
	method, path, host := cmp.Or(req.Method, http.MethodGet), req.Path, cmp.Or(req.Host, "localhost")
	if !strings.HasPrefix(path, "/") {
		return config.Route{}, false, badRequest("path must start with '/', got %q", path)
	}
	hr, err := http.NewRequest(method, "http://"+host+path, nil)
	if err != nil {
		return config.Route{}, false, badRequest("method %q, host %q, path %q: %v", method, host, path, err)
	}
	rt, ok := p.Route(hr)
	return rt, ok, nil
}

// identity returns the identity a policy limits for the key of a CheckRequest.
func (s *Server) identity(cfg *config.Config, p *config.Policy, key string) (keys.Identity, error) {
	switch p.Key.Type {
	case config.KeyIP:
		addr, err := netip.ParseAddr(key)
		if err != nil {
			return keys.Identity{}, badRequest("policy %q limits client IPs: key %q is not an IP address", p.Name, key)
		}
		prefix, err := clientIP(&cfg.Identity).Aggregate(addr)
		if err != nil {
			return keys.Identity{}, badRequest("key %q: %v", key, err)
		}
		return keys.Identity{Kind: keys.IP, ID: keys.PrefixID(prefix)}, nil
	case config.KeyUser:
		return keys.Identity{Kind: keys.User, ID: key}, nil
	case config.KeyAPIKey:
		h, err := s.hashers.get(cfg)
		if err != nil {
			return keys.Identity{}, err
		}
		return h.Identity(key), nil
	}
	return keys.Identity{}, fmt.Errorf("server: policy %q has unknown key type %v", p.Name, p.Key.Type)
}

// admin guards an admin endpoint with "Authorization: Bearer <token>", compared in
// constant time: 403 when no token is configured, 401 for a missing or wrong one.
func (s *Server) admin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		want, err := s.opts.AdminToken()
		if err != nil || want == "" {
			s.metrics.adminDenied.Inc()
			writeProblem(w, r, http.StatusForbidden,
				"Admin endpoints are disabled: no admin token is configured.")
			return
		}
		got, ok := bearer(r)
		gs, ws := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
		if !ok || subtle.ConstantTimeCompare(gs[:], ws[:]) != 1 {
			s.metrics.adminDenied.Inc()
			s.log.LogAttrs(r.Context(), slog.LevelWarn, "admin request refused",
				slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr))
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice admin"`)
			writeProblem(w, r, http.StatusUnauthorized,
				"A valid admin token is required (Authorization: Bearer <token>).")
			return
		}
		next(w, r)
	}
}

func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func (s *Server) serveReset(w http.ResponseWriter, r *http.Request) int {
	req, err := s.decodeCheck(w, r)
	if err != nil {
		return s.writeError(w, r, err)
	}
	ctx := r.Context()
	items, _, err := s.items(s.config(), req)
	if err != nil {
		return s.writeError(w, r, err)
	}
	resp := ResetResponse{Reset: []string{}}
	for i := range items {
		it := &items[i]
		if it.status != config.Limited {
			continue
		}
		if err := s.opts.Limiter.Reset(ctx, keys.Bound(it.Key), it.Limit); err != nil { // the key Evaluate decides
			return s.writeError(w, r, err)
		}
		resp.Reset = append(resp.Reset, it.name)
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, "limits reset", slog.Any("limits", resp.Reset),
		slog.String("policy", req.Policy), slog.String("domain", req.Domain))
	writeJSON(w, http.StatusOK, resp)
	return codeOK
}

// serveRelease releases a lease of the concurrency limits of the Subject named.
func (s *Server) serveRelease(w http.ResponseWriter, r *http.Request) int {
	var req ReleaseRequest
	if err := decodeBody(w, r, maxEnvelope, &req, `{"policy", "key", "lease"}`); err != nil {
		return s.writeError(w, r, err)
	}
	if req.Policy == "" {
		return s.writeError(w, r, badRequest("a release names the policy (and key) whose check took the lease"))
	}
	var lease sluice.LeaseID
	if err := lease.UnmarshalText([]byte(req.Lease)); err != nil || lease == 0 {
		err = cmp.Or(err, fmt.Errorf("%w: %q is not a lease id", sluice.ErrInvalidLease, req.Lease))
		return s.writeError(w, r, badRequest("%v", err))
	}
	items, _, err := s.items(s.config(), &CheckRequest{Subject: req.Subject})
	if err != nil {
		return s.writeError(w, r, err)
	}
	var resp ReleaseResponse
	found := false
	for i := range items {
		it := &items[i]
		if it.status != config.Limited || it.Limit.Algorithm != sluice.Concurrency {
			continue
		}
		found = true
		held, err := s.opts.Limiter.Release(r.Context(), it.Key, it.Limit, lease)
		if err != nil {
			return s.writeError(w, r, err)
		}
		if held {
			resp = ReleaseResponse{Released: true, Limit: it.name}
			break
		}
	}
	if !found {
		return s.writeError(w, r, badRequest("policy %q holds no concurrency limit for this request: nothing to release", req.Policy))
	}
	writeJSON(w, http.StatusOK, resp)
	return codeOK
}

// serveSettle settles a reservation of the limits of the Subject named: 404 for an
// unknown reservation, 409 for a second settlement, 400 for a negative cost.
func (s *Server) serveSettle(w http.ResponseWriter, r *http.Request) int {
	var req SettleRequest
	if err := decodeBody(w, r, maxEnvelope, &req, `{"policy", "key", "reservation", "cost"}`); err != nil {
		return s.writeError(w, r, err)
	}
	switch {
	case req.Policy == "":
		return s.writeError(w, r, badRequest("a settlement names the policy (and key) whose check made the reservation"))
	case req.Cost == nil:
		return s.writeError(w, r, badRequest("a settlement needs the actual cost"))
	case *req.Cost < 0:
		return s.writeError(w, r, badRequest("cost must not be negative, got %d", *req.Cost))
	}
	cfg := s.config()
	if p, ok := cfg.Policy(req.Policy); ok && p.Settle == nil {
		return s.writeError(w, r, badRequest("policy %q does not settle costs (it has no settle block)", req.Policy))
	}
	items, _, err := s.items(cfg, &CheckRequest{Subject: req.Subject})
	if err != nil {
		return s.writeError(w, r, err)
	}
	var reservation sluice.ReservationID
	if reservation.UnmarshalText([]byte(req.Reservation)) != nil || reservation == 0 {
		items = nil // an id no store gives: none holds it
	}
	err = fmt.Errorf("%w: %.40q", sluice.ErrUnknownReservation, req.Reservation)
	for i := range items {
		it := &items[i]
		if it.status != config.Limited {
			continue
		}
		var d sluice.Decision
		d, err = s.opts.Limiter.Settle(r.Context(), it.Key, it.Limit, reservation, *req.Cost)
		if errors.Is(err, sluice.ErrUnknownReservation) {
			continue // another limit's, perhaps
		}
		if err != nil {
			break
		}
		it.Decided, it.Decision = true, d
		writeJSON(w, http.StatusOK, SettleResponse{Settled: true, Limit: limitStatus(it)})
		return codeOK
	}
	switch {
	case errors.Is(err, sluice.ErrUnknownReservation):
		return s.writeError(w, r, &apiError{http.StatusNotFound, err.Error()})
	case errors.Is(err, sluice.ErrSettled):
		return s.writeError(w, r, &apiError{http.StatusConflict, err.Error()})
	}
	return s.writeError(w, r, err)
}

func (s *Server) handleConfig(w http.ResponseWriter, r *http.Request) error {
	b, err := s.config().Dump()
	if err != nil {
		return err
	}
	_ = s.ovr.refresh(r.Context(), false)
	b = appendOverrides(b, s.ovr.set.Load().List("", s.now()))
	writeBody(w, http.StatusOK, "application/json", b)
	return nil
}

// logDenied logs the limits that denied one request at Debug level (the observe
// decorator keeps the decision log).
func (s *Server) logDenied(ctx context.Context, what string, items []item) {
	if !s.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	for i := range items {
		it := &items[i]
		if !it.Over() {
			continue
		}
		attrs := []slog.Attr{
			slog.String("for", what),
			slog.String("limit", it.name),
			slog.String("key", it.Key),
			slog.Bool("shadow", it.Shadow),
			slog.String("status", it.status.String()),
		}
		if it.Decided {
			attrs = append(attrs,
				slog.String("applied", it.Decision.Limit.String()),
				slog.Int64("remaining", it.Decision.Remaining),
				logattr.Millis("retry_after_ms", it.Decision.RetryAfter),
				slog.String("decided_by", it.Decision.Path.String()))
		}
		s.log.LogAttrs(ctx, slog.LevelDebug, "rate limit exceeded", attrs...)
	}
}
