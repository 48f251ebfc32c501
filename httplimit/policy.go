package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/overload"
)

// A KeyFunc says who a request is, for one policy. The zero Identity means the policy does
// not apply to the request (for example no API key was presented); an error means the
// request cannot be identified and is answered by Config.Error (500 by default), never
// let through.
type KeyFunc func(r *http.Request) (keys.Identity, error)

// Policy is one limit the middleware enforces (or, in shadow mode, only measures).
//
// Which Limit applies to a request is decided in this order: Lookup(identity), then
// Overrides[identity], then Tiers[Config.Tier(r)], then Limit. If that gives the zero
// Limit the policy does not apply to the request.
type Policy struct {
	// Name identifies the policy in the RateLimit-Policy and RateLimit headers, in the
	// problem body's violated-policies, in logs and in store keys. Required, unique, and
	// printable ASCII (it is sent as a structured-field String).
	Name string
	// Limit is the limit for requests whose tier has no entry in Tiers.
	Limit sluice.Limit
	// Tiers maps tier names (as returned by Config.Tier) to their limits.
	Tiers map[string]sluice.Limit
	// Overrides maps identities (as returned by Key) to their own limits, ahead of tiers.
	// API-key identities hold the key's MAC: write keys.Hasher.Identity(rawKey), never
	// the raw key, into this map.
	Overrides map[keys.Identity]sluice.Limit
	// Lookup, when set, returns a limit set for the identity at run time (the overrides
	// API of `sluice serve` and `sluice proxy`), ahead of Overrides. It is called on every
	// request and must be fast and safe for concurrent use.
	Lookup func(keys.Identity) (sluice.Limit, bool)
	// Key identifies the client. Nil means ByIP(nil): the connection's peer address.
	Key KeyFunc
	// Route restricts the policy to requests that http.ServeMux would route to this
	// pattern ("GET /items/{id}", "/admin/", "api.example.com/"), with ServeMux's
	// precedence among the Routes of its RouteSet: a request matches the most specific
	// pattern only. The path is normalised first (docs/http.md), and the pattern's
	// path is matched without regard to case. Empty means every request. Each route
	// pattern keeps its own state, shared by every path it matches.
	Route string
	// RouteSet names the set of Routes this policy's Route is chosen among: a request
	// matches the most specific pattern of its set only, and sets are independent, so one
	// set's "/v1/items" never hides another set's "/v1/". Policies without one share the
	// set "".
	RouteSet string
	// Shadow makes the policy measure without enforcing: it is decided, logged and
	// reported in the headers, but never blocks a request, and its store errors are
	// logged and ignored.
	Shadow bool
	// Failure says how the policy is decided when the store cannot decide it (read by a
	// failover decorator in the Limiter); the zero value takes the decorator's default.
	Failure sluice.Failure
	// PartitionKey adds the pk parameter to this policy's header items: the identity as
	// "kind:id" (keys.Identity.String), a Byte Sequence. API keys appear as their MAC.
	PartitionKey bool
	// Settle, when set, makes the policy's cost an estimate settled when the handler
	// returns (see Settle).
	Settle *Settle
	// Criticality, when set, is the criticality under Config.Overload of the requests
	// this policy's Route matches; see Config.Criticality for how the policies'
	// criticalities and a request's claim combine. Nil sets none.
	Criticality *overload.Criticality

	set int // the index of RouteSet's routes in the Middleware
}

// Settle makes a policy's cost an estimate: the request spends the estimate (from
// EstimateFrom, else Estimate; at least 1), and when the handler has returned, the
// middleware settles it (sluice.Limiter.Settle) at the actual cost the handler put in
// CostHeader, as a response header or a trailer, whatever the estimate was. A response
// without it leaves the estimate standing.
type Settle struct {
	// TTL is how long the reservation waits (sluice.Request.SettleTTL). Required.
	TTL time.Duration
	// EstimateFrom returns the request's estimate as written: a non-negative integer, or
	// "" for none; see Trust in the package doc. Nil means Estimate only.
	EstimateFrom func(*http.Request) string
	// Estimate is the estimate when EstimateFrom gives none; 0 means 1.
	Estimate int64
	// CostHeader names the response header or trailer with the actual cost. Required.
	CostHeader string
}

// estimate is the request's estimated cost under limit, in [1, limit.MaxCost()].
func (s *Settle) estimate(r *http.Request, limit sluice.Limit) (int64, error) {
	n := s.Estimate
	if s.EstimateFrom != nil {
		if v := s.EstimateFrom(r); v != "" {
			e, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || e < 0 {
				return 0, fmt.Errorf("%w: want a non-negative integer, got %.40q", ErrEstimate, v)
			}
			n = e
		}
	}
	return min(max(n, 1), limit.MaxCost()), nil
}

// actual is the cost the handler reported in w's header or trailers, or false.
func (s *Settle) actual(h http.Header) (int64, bool) {
	v := h.Get(s.CostHeader)
	if v == "" {
		v = h.Get(http.TrailerPrefix + s.CostHeader)
	}
	c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return c, err == nil && c >= 0
}

// limitFor resolves the Limit for id and tier; ok is false when the policy does not apply.
// The returned tier is the one whose limit was used, or "" for Limit and overrides.
func (p *Policy) limitFor(id keys.Identity, tier string) (sluice.Limit, string, bool) {
	if p.Lookup != nil {
		if l, ok := p.Lookup(id); ok {
			return l, "", true
		}
	}
	if l, ok := p.Overrides[id]; ok {
		return l, "", true
	}
	if l, ok := p.Tiers[tier]; ok {
		return l, tier, true
	}
	if p.Limit == (sluice.Limit{}) {
		return sluice.Limit{}, "", false
	}
	return p.Limit, "", true
}

// ByIP identifies requests by client address, found by c (nil means the zero
// keys.ClientIP: the connection's peer, no proxy trusted). IPv6 clients are aggregated to
// c's prefix (/64 by default).
func ByIP(c *keys.ClientIP) KeyFunc {
	if c == nil {
		c = &keys.ClientIP{}
	}
	return c.Identity
}

// ByAPIKey identifies requests by API key: extract returns the raw key ("" when none was
// presented, so the policy does not apply), and h replaces it with its HMAC at once. With
// a nil Hasher or extractor every request fails with an error (500).
func ByAPIKey(h *keys.Hasher, extract func(*http.Request) string) KeyFunc {
	if h == nil || extract == nil {
		return failing(errors.New("httplimit: ByAPIKey needs a Hasher and an extractor"))
	}
	return func(r *http.Request) (keys.Identity, error) {
		return h.Identity(extract(r)), nil
	}
}

// ByUser identifies requests by the user ID that user returns ("" for an anonymous
// request, so the policy does not apply). user reads what authentication established
// (see Trust in the package doc). A nil user fails every request with an error (500).
func ByUser(user func(*http.Request) string) KeyFunc {
	if user == nil {
		return failing(errors.New("httplimit: ByUser needs a user function"))
	}
	return func(r *http.Request) (keys.Identity, error) {
		if id := user(r); id != "" {
			return keys.Identity{Kind: keys.User, ID: id}, nil
		}
		return keys.Identity{}, nil
	}
}

func failing(err error) KeyFunc {
	return func(*http.Request) (keys.Identity, error) { return keys.Identity{}, err }
}

// Global identifies every request as one client, for a limit shared by all (typically
// on one Route).
func Global() KeyFunc {
	return func(*http.Request) (keys.Identity, error) {
		return keys.Identity{Kind: "global", ID: "*"}, nil
	}
}

// Header returns an extractor for ByAPIKey that reads the named request header, trimmed.
func Header(name string) func(*http.Request) string {
	return func(r *http.Request) string { return strings.TrimSpace(r.Header.Get(name)) }
}

// ByTrustedHeader identifies a request that comes straight from one of c's trusted
// proxies by the ID in the named header, as an identity of kind (none: the policy does
// not apply), and a request from any other peer by its client address (ByIP(c)).
func ByTrustedHeader(c *keys.ClientIP, name string, kind keys.Kind) KeyFunc {
	get, byIP := Header(name), ByIP(c)
	return func(r *http.Request) (keys.Identity, error) {
		if !trusted(c, r) {
			return byIP(r)
		}
		if id := get(r); id != "" {
			return keys.Identity{Kind: kind, ID: id}, nil
		}
		return keys.Identity{}, nil
	}
}

// TrustedHeader reads a header that selects an identity, a tier, a cost or a priority,
// by the rule of Trust in the package doc: the named header's value for a request sent
// straight by one of c's trusted proxies (keys.ClientIP.Trusted), else "". Use it for
// Config.Tier, Settle.EstimateFrom and ByUser (or ByTrustedHeader).
func TrustedHeader(c *keys.ClientIP, name string) func(*http.Request) string {
	get := Header(name)
	return func(r *http.Request) string {
		if !trusted(c, r) {
			return ""
		}
		return get(r)
	}
}

// BearerToken is an extractor for ByAPIKey that reads "Authorization: Bearer <token>"
// (the scheme is case-insensitive, RFC 6750 §2.1).
func BearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// verdictKey is the context key of a request's trust verdict (Config.Trust).
type verdictKey struct{}

// verdict is c.Trusted of one request, taken once by the middleware.
type verdict struct {
	c       *keys.ClientIP
	trusted bool
}

// withVerdict returns ctx carrying c's verdict on r.
func withVerdict(ctx context.Context, c *keys.ClientIP, r *http.Request) context.Context {
	return context.WithValue(ctx, verdictKey{}, &verdict{c: c, trusted: c.Trusted(r)})
}

// trusted reports whether r comes straight from one of c's trusted proxies: the verdict
// the middleware took for r with this c (Config.Trust), else c.Trusted(r). A nil c
// trusts no one.
func trusted(c *keys.ClientIP, r *http.Request) bool {
	if c == nil {
		return false
	}
	if v, ok := r.Context().Value(verdictKey{}).(*verdict); ok && v.c == c {
		return v.trusted
	}
	return c.Trusted(r)
}
