package config

import (
	"cmp"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/route"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/overload"
	"github.com/sluicehq/sluice/store"
)

// Policy is one named sluice policy: who is limited (Key), how much ([Policy.LimitFor]),
// which routes carry limits of their own (a request matching one is limited by both),
// and what happens when the store fails.
type Policy struct {
	// Name identifies the policy (metrics, logs, headers, the /v1/check API).
	Name string
	// Limit is the policy's own limit; zero when it sets only tiers.
	Limit sluice.Limit
	// Key says where the identity that is limited comes from.
	Key KeySource
	// Shadow: decide, log and send headers, but never block.
	Shadow bool
	// FailureMode and LocalShare are failure_mode and local_share (or 1/expected_nodes)
	// as written, unset when zero; [Config.Failure] resolves them. The share is that of
	// the limit the in-process fallback gets in sluice.FailLocal mode, in (0, 1].
	FailureMode sluice.FailureMode
	LocalShare  float64
	// ExpectedNodes is expected_nodes as written (0 when the file gave local_share).
	ExpectedNodes int
	// TierHeader is the request header naming the client's tier, believed only from
	// identity.trusted_proxies. Empty: every request gets DefaultTier.
	TierHeader string
	// DefaultTier is the tier of requests without a (known) tier; empty means Limit.
	DefaultTier string
	// Tiers are the tier limits in file order.
	Tiers []Tier
	// Routes are the per-route limits in file order.
	Routes []Route
	// Overrides are the per-identity limits in file order.
	Overrides []Override
	// IdentityTiers map identities to their tier, ahead of TierHeader.
	IdentityTiers []IdentityTier
	// Settle, when set, makes the policy's costs estimates settled later.
	Settle *Settle
	// Criticality is criticality as written: the criticality under the overload limit
	// (the top-level overload block) of the requests the policy applies to. Nil when the
	// policy names none. See Overload for how criticalities combine.
	Criticality *overload.Criticality
	// Pos is where the policy starts.
	Pos Position

	tiers     map[string]sluice.Limit
	overrides map[string]Override
	idTiers   map[string]IdentityTier
	mux       *http.ServeMux

	path     string
	nameNode *yaml.Node
}

// Tier is a named limit, such as free or pro.
type Tier struct {
	Name  string
	Limit sluice.Limit
}

// Route is a limit for requests matching a net/http ServeMux pattern such as
// "GET /v1/items/{id}" or "/admin/".
type Route struct {
	Pattern string
	Limit   sluice.Limit
	// Estimate is the route's fixed estimate of a request's cost (estimate: in the file)
	// when its policy settles costs (Policy.Settle); 0 means the policy's.
	Estimate int64
	// Criticality is the route's criticality as written (see Policy.Criticality); nil
	// when it names none.
	Criticality *overload.Criticality
}

// Settle is a policy's settle block: a request spends its estimated cost at once and
// holds a reservation for up to TTL, settled at the actual cost (see
// docs/concurrency-and-settlement.md).
type Settle struct {
	// TTL is how long a reservation waits for its actual cost; then the estimate stands.
	TTL time.Duration
	// EstimateHeader is the request header holding the estimate (default X-Cost-Estimate),
	// believed only from identity.trusted_proxies.
	EstimateHeader string
	// CostHeader is the upstream's response header or trailer holding the actual cost
	// (default X-Cost).
	CostHeader string
	// Estimate is the estimate of a request without EstimateHeader (default 1).
	Estimate int64
}

// Default header names of Settle.
const (
	DefaultEstimateHeader = "X-Cost-Estimate"
	DefaultCostHeader     = "X-Cost"
)

// Override is a limit for one identity, replacing the tier and policy limits.
type Override struct {
	// ID is the identity's ID, as keys.Identity.ID holds it (an API key's MAC in hex).
	ID    string
	Limit sluice.Limit

	written
}

// written is where an identity is written in a file.
type written struct {
	node  *yaml.Node
	field string
}

// IdentityTier puts one identity in a tier. ID is as in Override.
type IdentityTier struct {
	ID   string
	Tier string

	written
}

// IdentityForm is what [Policy.ParseIdentity] accepts beyond the forms it always does.
// The zero value is what a configuration file accepts.
type IdentityForm struct {
	// Patterns accepts a trailing '*', matching every identity that begins with the text
	// before it (not for API keys).
	Patterns bool
	// HashKey, when set, reads a bare identity of an API-key policy as the raw key and
	// returns its MAC; when nil, an API key is written as its MAC.
	HashKey func(apiKey string) (string, error)
	// ClientIP, when set, reads an IP address or prefix as the identity of the clients it
	// covers (keys.ClientIP.ParseID); when nil, it is taken as written.
	ClientIP *keys.ClientIP
}

// ParseIdentity reads the identity s an operator writes for p (an override's, an identity
// tier's) and returns its ID, as keys.Identity.ID holds it. Accepted are
// keys.Identity.String's form ("api_key:<MAC>", "user:<id>", "ip:<address or prefix>"),
// "hmac:<MAC>", a store key of p (keys.Key.String), the bare ID, and what form adds; a
// MAC is 64 lower-case hex digits. An identity of another kind than p limits, an empty
// one, or one with surrounding white space or control characters is an error.
func (p *Policy) ParseIdentity(s string, form IdentityForm) (string, error) {
	if s == "" || strings.TrimSpace(s) != s || strings.ContainsAny(s, "\x00\r\n") {
		return "", fmt.Errorf("must be non-empty, without surrounding white space or control characters")
	}
	kind := p.Key.Type.Kind()
	if k, err := keys.ParseKey(s); err == nil && k.Policy == p.Name && k.Kind == kind && k.ID != "" {
		return p.checkID(k.ID, s, form)
	}
	for _, other := range []string{"ip", "user", "api_key", "hmac"} {
		if _, ok := strings.CutPrefix(s, other+":"); ok && other != string(kind) && (other != "hmac" || kind != keys.APIKey) {
			return "", fmt.Errorf("%q is of kind %s, and policy %q limits %s", s, strings.Replace(other, "hmac", "api_key", 1), p.Name, p.limits())
		}
	}
	if pat, ok := strings.CutSuffix(s, "*"); ok && form.Patterns {
		if kind == keys.APIKey {
			return "", fmt.Errorf("a pattern cannot match API keys, which are kept only as their MACs: policy %q limits %s, so an override names one key", p.Name, p.limits())
		}
		pat = strings.TrimPrefix(pat, string(kind)+":")
		if strings.Contains(pat, "*") {
			return "", fmt.Errorf("only a trailing '*' makes a pattern, got %q", s)
		}
		return pat + "*", nil
	}
	for _, prefix := range []string{string(kind), "hmac"} { // "hmac:" only for API keys, above
		if id, ok := cutKind(s, prefix); ok {
			return p.checkID(id, s, form)
		}
	}
	if kind == keys.APIKey && form.HashKey != nil {
		if _, err := netip.ParseAddr(s); err == nil {
			return "", fmt.Errorf("%s is an IP address, and policy %q limits %s", s, p.Name, p.limits())
		}
		if _, err := netip.ParsePrefix(s); err == nil {
			return "", fmt.Errorf("%s is an IP prefix, and policy %q limits %s", s, p.Name, p.limits())
		}
		return form.HashKey(s)
	}
	return p.checkID(s, s, form)
}

// checkID is ParseIdentity's answer for id, written as s.
func (p *Policy) checkID(id, s string, form IdentityForm) (string, error) {
	switch p.Key.Type {
	case KeyAPIKey:
		if len(id) != 64 || strings.Trim(id, "0123456789abcdef") != "" {
			return "", fmt.Errorf("must be an API key's MAC as sluice prints it, api_key:<64 lower-case hex digits> (`sluice key` prints it), got %q", s)
		}
	case KeyIP:
		if form.ClientIP != nil {
			if v, err := form.ClientIP.ParseID(id); err == nil {
				return v, nil
			}
		} else if pfx, err := parsePrefix(id); err == nil {
			return keys.PrefixID(pfx), nil
		}
		return "", fmt.Errorf("must be a client address or prefix (ip:203.0.113.7, ip:2001:db8::/64), got %q, and policy %q limits %s", s, p.Name, p.limits())
	case KeyUser:
		if id == "" {
			return "", fmt.Errorf("names an empty user ID")
		}
	}
	return id, nil
}

// limits names what p limits, as an operator writes its identities.
func (p *Policy) limits() string {
	switch p.Key.Type {
	case KeyAPIKey:
		return "API keys (the " + p.Key.Header + " header)"
	case KeyUser:
		return "user IDs (the " + p.Key.Header + " header)"
	}
	return "client IP addresses"
}

// cutKind removes "kind:" from s, unescaping the rest as keys.Identity.String escapes it
// when it parses so (not "ip:2001:db8::1").
func cutKind(s, kind string) (string, bool) {
	rest, ok := strings.CutPrefix(s, kind+":")
	if !ok {
		return "", false
	}
	if id, err := keys.ParseIdentity(s); err == nil && string(id.Kind) == kind {
		return id.ID, true
	}
	return rest, true
}

// KeySource says where a policy's identity comes from.
type KeySource struct {
	Type KeyType
	// Header is the request header carrying the user ID or API key; empty for KeyIP.
	Header string
}

// KeyType is the kind of identity a policy limits. The zero value is KeyIP.
type KeyType uint8

const (
	// KeyIP limits the client IP (see Identity).
	KeyIP KeyType = iota
	// KeyUser limits the user ID in a header set by the authentication layer.
	KeyUser
	// KeyAPIKey limits the API key in a header, HMAC-hashed before use.
	KeyAPIKey
)

var keyTypeNames = [...]string{"ip", "user", "api_key"}

// Default headers of the key sources.
const (
	DefaultUserHeader   = "X-User-ID"
	DefaultAPIKeyHeader = "X-API-Key"
)

// String returns "ip", "user" or "api_key".
func (t KeyType) String() string { return enumName(keyTypeNames[:], t, "key_type") }

// Kind is the kind of the identities a policy of key type t limits.
func (t KeyType) Kind() keys.Kind { return keys.Kind(t.String()) }

// Tier returns the limit of the named tier.
func (p *Policy) Tier(name string) (sluice.Limit, bool) {
	l, ok := p.tiers[name]
	return l, ok
}

// IdentityTier returns the tier identity_tiers puts one identity in.
func (p *Policy) IdentityTier(id string) (string, bool) {
	t, ok := p.idTiers[id]
	return t.Tier, ok
}

// Override returns the limit configured for one identity.
func (p *Policy) Override(id string) (sluice.Limit, bool) {
	o, ok := p.overrides[id]
	return o.Limit, ok
}

// LimitFor returns the limit of one identity in the tier the request named ("" for none)
// and where it came from: "override", "tier:<name>" or "policy". The override comes
// first, then IdentityTiers, then the tier named if configured, then DefaultTier, then
// Limit. The result is always a valid limit.
func (p *Policy) LimitFor(id, tier string) (sluice.Limit, string) {
	if l, ok := p.Override(id); ok {
		return l, "override"
	}
	for _, name := range [...]string{p.idTiers[id].Tier, tier, p.DefaultTier} {
		if l, ok := p.tiers[name]; ok && name != "" {
			return l, "tier:" + name
		}
	}
	return p.Limit, "policy"
}

// Route returns the route limit that applies to r: the pattern net/http's ServeMux would
// choose for r's path normalised as package internal/route documents.
func (p *Policy) Route(r *http.Request) (Route, bool) {
	if p.mux == nil {
		return Route{}, false
	}
	if i, ok := route.Match(p.mux, r); ok {
		return p.Routes[i], true
	}
	return Route{}, false
}

// sluiceFile is what one sluice policy file holds.
type sluiceFile struct {
	store                              *Store
	admin                              *Admin
	identity                           *Identity
	overload                           *Overload
	storeNode, adminNode, identityNode *yaml.Node
	overloadNode                       *yaml.Node
	policies                           []*Policy
	quotas                             []*QuotaDomain
}

func (d *decoder) sluiceFile(root *yaml.Node) *sluiceFile {
	o := d.object(root, "", "store", "admin", "identity", "overload", "policies", "quota_domains")
	if o == nil {
		return nil
	}
	if len(o.fields) == 0 {
		d.errorf(root, "", "neither a sluice policy file (store, admin, identity, policies) nor an envoyproxy/ratelimit file (domain)")
		return nil
	}
	sf := &sluiceFile{}
	if n, ok := o.get("store"); ok {
		sf.store, sf.storeNode = d.store(n), o.fields["store"].key
	}
	if n, ok := o.get("admin"); ok {
		sf.admin, sf.adminNode = d.admin(n), o.fields["admin"].key
	}
	if n, ok := o.get("identity"); ok {
		sf.identity, sf.identityNode = d.identity(n), o.fields["identity"].key
	}
	if n, ok := o.get("overload"); ok {
		sf.overload, sf.overloadNode = d.overload(n), o.fields["overload"].key
		if sf.overload != nil {
			sf.overload.Pos = d.pos(sf.overloadNode)
		}
	}
	if n, ok := o.get("quota_domains"); ok {
		sf.quotas = d.quotaDomains(n)
	}
	if n, ok := o.get("policies"); ok {
		for i, item := range d.seq(n, "policies") {
			if p := d.policy(item, index("policies", i)); p != nil {
				sf.policies = append(sf.policies, p) // names are checked by the merger
			}
		}
	}
	return sf
}

func (d *decoder) store(n *yaml.Node) *Store {
	o := d.object(n, "store", "redis_url", "redis_url_env", "deadline", "failure_mode", "local_share", "expected_nodes", "deny_cache", "request_limits")
	if o == nil {
		return nil
	}
	s := &Store{}
	if v, ok := o.get("redis_url"); ok {
		s.RedisURL, _ = d.str(v, o.field("redis_url"))
		if s.RedisURL != "" && !strings.HasPrefix(s.RedisURL, "redis://") && !strings.HasPrefix(s.RedisURL, "rediss://") && !strings.HasPrefix(s.RedisURL, "unix://") {
			d.errorf(v, o.field("redis_url"), "must be a redis://, rediss:// or unix:// URL")
		}
	}
	if v, ok := o.get("redis_url_env"); ok {
		if o.has("redis_url") {
			d.errorf(v, o.field("redis_url_env"), "set redis_url or redis_url_env, not both")
		}
		s.RedisURLEnv, _ = d.str(v, o.field("redis_url_env"))
		if s.RedisURLEnv != "" {
			s.RedisURL = os.Getenv(s.RedisURLEnv)
			if s.RedisURL == "" {
				d.errorf(v, o.field("redis_url_env"), "environment variable %s is not set or empty", s.RedisURLEnv)
			}
		}
	}
	read(o, "deadline", &s.Deadline, d.duration)
	s.FailureMode, s.LocalShare, _ = d.failure(o)
	read(o, "deny_cache", &s.DenyCache, d.denyCache)
	read(o, "request_limits", &s.RequestLimits, d.requestLimits)
	return s
}

// requestLimits reads request_limits: {max_descriptors, max_entries, max_bytes}.
func (d *decoder) requestLimits(n *yaml.Node, path string) (RequestLimits, bool) {
	o := d.object(n, path, "max_descriptors", "max_entries", "max_bytes")
	if o == nil {
		return RequestLimits{}, false
	}
	var l RequestLimits
	read(o, "max_descriptors", &l.MaxDescriptors, intIn[int](d, 1, 1<<20))
	read(o, "max_entries", &l.MaxEntries, intIn[int](d, 1, 1<<20))
	read(o, "max_bytes", &l.MaxBytes, intIn[int](d, 1, 1<<30))
	return l, true
}

// denyCache reads deny_cache: off, or {max_bytes, max_age}.
func (d *decoder) denyCache(n *yaml.Node, path string) (DenyCache, bool) {
	if n = deref(n); n.Kind == yaml.ScalarNode {
		if on, ok := d.boolean(n, path); ok && on {
			d.errorf(n, path, "must be off or {max_bytes, max_age}; it is on unless turned off")
		}
		return DenyCache{Off: true}, true
	}
	o := d.object(n, path, "max_bytes", "max_age")
	if o == nil {
		return DenyCache{}, false
	}
	var c DenyCache
	if read(o, "max_bytes", &c.MaxBytes, intIn[int64](d, 0, 1<<40)) {
		c.Off = c.MaxBytes == 0
	}
	read(o, "max_age", &c.MaxAge, d.duration)
	return c, true
}

// failure reads failure_mode, local_share and expected_nodes of o.
func (d *decoder) failure(o *object) (mode sluice.FailureMode, share float64, nodes int) {
	if v, ok := o.get("failure_mode"); ok {
		s, _ := d.str(v, o.field("failure_mode"))
		m, err := sluice.ParseFailureMode(s)
		if err != nil {
			d.errorf(v, o.field("failure_mode"), "%v", err)
		}
		mode = m
	}
	vs, hasShare := o.get("local_share")
	vn, hasNodes := o.get("expected_nodes")
	switch {
	case hasShare && hasNodes:
		d.errorf(vn, o.field("expected_nodes"), "set local_share or expected_nodes, not both")
	case hasShare:
		if f, ok := d.number(vs, o.field("local_share")); ok {
			if !(f > 0 && f <= 1) {
				d.errorf(vs, o.field("local_share"), "must be in (0, 1], got %v", f)
			} else {
				share = f
			}
		}
	case hasNodes:
		if v, ok := d.integer(vn, o.field("expected_nodes"), 1, 1<<20); ok {
			nodes = int(v)
			share = 1 / float64(v)
		}
	}
	return mode, share, nodes
}

// ownShare reports a policy's local_share or expected_nodes beside its own failure_mode
// of open or closed, which always applies, so its share never would.
func (d *decoder) ownShare(o *object, mode sluice.FailureMode) {
	if mode == sluice.FailInherit || mode == sluice.FailLocal {
		return
	}
	for _, f := range []string{"local_share", "expected_nodes"} {
		if v, ok := o.get(f); ok {
			d.errorf(v, o.field(f), "only applies to failure_mode local, not %s", mode)
			return
		}
	}
}

func (d *decoder) admin(n *yaml.Node) *Admin {
	o := d.object(n, "admin", "token_env", "token_file")
	if o == nil {
		return nil
	}
	a := &Admin{}
	read(o, "token_env", &a.TokenEnv, d.str)
	read(o, "token_file", &a.TokenFile, d.str)
	return a
}

func (d *decoder) identity(n *yaml.Node) *Identity {
	o := d.object(n, "identity", "trusted_proxies", "client_ip_header", "ipv6_prefix", "api_key_secret_env")
	if o == nil {
		return nil
	}
	id := &Identity{IPv6Prefix: DefaultIPv6Prefix, ClientIPHeader: keys.HeaderXForwardedFor}
	tp, _ := o.get("trusted_proxies")
	for i, item := range d.seq(tp, o.field("trusted_proxies")) {
		field := index(o.field("trusted_proxies"), i)
		s, ok := d.str(item, field)
		if !ok {
			continue
		}
		pfx, err := parsePrefix(s)
		if err != nil {
			d.errorf(item, field, "must be a CIDR such as 10.0.0.0/8 or an address: %q", s)
			continue
		}
		id.TrustedProxies = append(id.TrustedProxies, pfx)
	}
	if v, ok := o.get("client_ip_header"); ok {
		if s, ok := d.str(v, o.field("client_ip_header")); ok {
			if h, err := keys.ParseClientIPHeader(s); err != nil {
				d.errorf(v, o.field("client_ip_header"), "must be X-Forwarded-For, X-Real-IP or Forwarded, got %q", s)
			} else {
				id.ClientIPHeader = h
			}
		}
	}
	read(o, "ipv6_prefix", &id.IPv6Prefix, intIn[int](d, 1, 128))
	read(o, "api_key_secret_env", &id.APIKeySecretEnv, d.str)
	return id
}

// parsePrefix reads a CIDR or an address (a /32 or /128), masked, IPv4-mapped unmapped.
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

var policyFields = []string{
	"name", "algorithm", "rate", "period", "zone", "anchor_day", "burst", "lease", "key", "shadow",
	"failure_mode", "local_share", "expected_nodes",
	"tier_header", "default_tier", "tiers", "identity_tiers", "routes", "overrides", "settle",
	"criticality",
}

var limitFields = []string{"algorithm", "rate", "period", "zone", "anchor_day", "burst", "lease"}

func (d *decoder) policy(n *yaml.Node, path string) *Policy {
	o := d.object(n, path, policyFields...)
	if o == nil {
		return nil
	}
	p := &Policy{Pos: d.pos(n), path: path}
	p.nameNode, _ = o.get("name")
	p.Name, _ = d.str(p.nameNode, o.field("name"))
	if p.Name == "" {
		d.errorf(n, o.field("name"), "is required")
	} else if strings.TrimSpace(p.Name) != p.Name || strings.ContainsAny(p.Name, "\x00\n\r\t") {
		d.errorf(p.nameNode, o.field("name"), "must not contain white space at either end or control characters")
	}

	alg := sluice.GCRA
	var faulted []string // the algorithm, when d.algorithm reported it
	if v, ok := o.get("algorithm"); ok {
		n := len(d.errs)
		if alg = d.algorithm(v, o.field("algorithm")); len(d.errs) != n {
			faulted = append(faulted, "algorithm")
		}
	}
	hasRate, hasPeriod := o.has("rate"), o.has("period")
	if hasRate || hasPeriod || o.has("burst") || o.has("lease") || !o.has("tiers") {
		p.Limit, _ = d.limit(o, sluice.GCRA, faulted...)
	}

	p.Key = d.keySource(o)
	read(o, "shadow", &p.Shadow, d.boolean)
	read(o, "criticality", &p.Criticality, d.criticality)
	p.FailureMode, p.LocalShare, p.ExpectedNodes = d.failure(o)
	d.ownShare(o, p.FailureMode)

	read(o, "tier_header", &p.TierHeader, d.header)
	p.tiers = map[string]sluice.Limit{}
	declared := map[string]bool{}
	for _, kv := range d.pairs(o.fields["tiers"].val, o.field("tiers")) {
		declared[kv.key.Value] = true
		to := d.object(kv.val, join(o.field("tiers"), kv.key.Value), limitFields...)
		if to == nil {
			continue
		}
		if len(to.fields) == 0 {
			d.errorf(kv.key, to.path, "needs rate and period")
			continue
		}
		if l, ok := d.limit(to, alg); ok {
			p.Tiers = append(p.Tiers, Tier{Name: kv.key.Value, Limit: l})
			p.tiers[kv.key.Value] = l
		}
	}
	if v, ok := o.get("default_tier"); ok {
		p.DefaultTier, _ = d.str(v, o.field("default_tier"))
		if !declared[p.DefaultTier] {
			d.errorf(v, o.field("default_tier"), "names no tier of this policy: %q", p.DefaultTier)
		}
	}
	if o.has("tiers") && !hasRate && !hasPeriod && p.DefaultTier == "" {
		d.errorf(o.fields["tiers"].key, o.field("default_tier"), "is required when the policy has tiers but no rate and period of its own")
	}
	if p.TierHeader != "" && !o.has("tiers") {
		d.errorf(o.fields["tier_header"].key, o.field("tier_header"), "is set but the policy has no tiers")
	}

	if v, ok := o.get("routes"); ok {
		field := o.field("routes")
		mux := http.NewServeMux()
		for _, kv := range d.pairs(v, field) {
			rf := join(field, kv.key.Value)
			if err := route.Register(mux, kv.key.Value, len(p.Routes)); err != nil {
				d.errorf(kv.key, rf, "%v", err)
				continue
			}
			to := d.object(kv.val, rf, append(limitFields, "estimate", "criticality")...)
			if to == nil {
				continue
			}
			var crit *overload.Criticality
			read(to, "criticality", &crit, d.criticality)
			delete(to.fields, "criticality")
			var est int64
			if v, ok := to.get("estimate"); ok {
				est, _ = d.integer(v, to.field("estimate"), 1, store.MaxRate)
				if !o.has("settle") {
					d.errorf(v, to.field("estimate"), "needs the policy's settle block (its costs are not estimates otherwise)")
				}
				delete(to.fields, "estimate")
			}
			if l, ok := d.limit(to, alg); ok {
				p.Routes = append(p.Routes,
					Route{Pattern: kv.key.Value, Limit: l, Estimate: est, Criticality: crit})
			} else {
				p.Routes = append(p.Routes, Route{Pattern: kv.key.Value}) // keep indexes aligned; the load fails anyway
			}
		}
		p.mux = mux
	}

	if v, ok := o.get("settle"); ok {
		p.Settle = d.settle(v, o.field("settle"), p)
	}

	p.overrides = map[string]Override{}
	for _, kv := range d.pairs(o.fields["overrides"].val, o.field("overrides")) {
		of := join(o.field("overrides"), kv.key.Value)
		to := d.object(kv.val, of, limitFields...)
		if to == nil {
			continue
		}
		id, err := p.ParseIdentity(kv.key.Value, IdentityForm{})
		if err != nil {
			d.errorf(kv.key, of, "%v", err)
			continue
		}
		l, ok := d.limit(to, alg)
		if prev, dup := p.overrides[id]; ok && dup {
			d.errorf(kv.key, of, "names the same identity as %s", prev.field)
		} else if ok {
			p.overrides[id] = Override{ID: id, Limit: l, written: written{kv.key, of}}
			p.Overrides = append(p.Overrides, p.overrides[id])
		}
	}

	p.idTiers = map[string]IdentityTier{}
	if o.has("identity_tiers") && !o.has("tiers") {
		d.errorf(o.fields["identity_tiers"].key, o.field("identity_tiers"), "is set but the policy has no tiers")
	}
	for _, kv := range d.pairs(o.fields["identity_tiers"].val, o.field("identity_tiers")) {
		of := join(o.field("identity_tiers"), kv.key.Value)
		id, err := p.ParseIdentity(kv.key.Value, IdentityForm{})
		if err != nil {
			d.errorf(kv.key, of, "%v", err)
			continue
		}
		t, ok := d.str(kv.val, of)
		if !ok {
			continue
		}
		if !declared[t] {
			d.errorf(kv.val, of, "names no tier of this policy: %q", t)
			continue
		}
		if prev, dup := p.idTiers[id]; dup {
			d.errorf(kv.key, of, "names the same identity as %s", prev.field)
			continue
		}
		p.idTiers[id] = IdentityTier{ID: id, Tier: t, written: written{kv.key, of}}
		p.IdentityTiers = append(p.IdentityTiers, p.idTiers[id])
	}
	return p
}

// settle reads a policy's settle block; every limit of p must be one that settles.
func (d *decoder) settle(n *yaml.Node, field string, p *Policy) *Settle {
	o := d.object(n, field, "ttl", "estimate_header", "cost_header", "estimate")
	if o == nil {
		return nil
	}
	s := &Settle{EstimateHeader: DefaultEstimateHeader, CostHeader: DefaultCostHeader, Estimate: 1}
	if !read(o, "ttl", &s.TTL, d.periodIn(0, store.MaxSettleTTL)) {
		d.errorf(o.node, o.field("ttl"), "is required: how long a reservation waits for its actual cost, e.g. 5m")
	}
	read(o, "estimate_header", &s.EstimateHeader, d.header)
	read(o, "cost_header", &s.CostHeader, d.header)
	read(o, "estimate", &s.Estimate, intIn[int64](d, 1, store.MaxRate))
	limits := []sluice.Limit{p.Limit}
	for _, t := range p.Tiers {
		limits = append(limits, t.Limit)
	}
	for _, r := range p.Routes {
		limits = append(limits, r.Limit)
	}
	for _, l := range limits {
		if l.Rate > 0 && store.CheckSettleTTL(l, time.Second) != nil {
			d.errorf(n, field, "settles costs, which %v cannot (gcra, token_bucket, leaky_bucket, fixed_window and sliding_window can)", l.Algorithm)
			break
		}
	}
	return s
}

func (d *decoder) algorithm(n *yaml.Node, field string) sluice.Algorithm {
	s, ok := d.str(n, field)
	if !ok {
		return sluice.GCRA
	}
	a, err := sluice.ParseAlgorithm(s)
	if err != nil {
		d.errorf(n, field, "unknown algorithm %q (want one of %s)", s, algorithmList())
		return sluice.GCRA
	}
	return a
}

func algorithmList() string {
	var names []string
	for _, a := range store.Algorithms() {
		names = append(names, a.String())
	}
	return strings.Join(names, ", ")
}

// limit reads o's [LimitSpec] into a validated limit, inheriting the algorithm inherit.
// Each problem is reported at its field, but for those in faulted, already reported.
func (d *decoder) limit(o *object, inherit sluice.Algorithm, faulted ...string) (sluice.Limit, bool) {
	before := len(d.errs)
	var s LimitSpec
	skip := d.readSpec(o, &s)
	for _, f := range faulted {
		skip[f] = true
	}
	if !o.has("rate") {
		d.errorf(o.node, o.field("rate"), "is required")
		skip["rate"] = true
	}
	l, err := s.Limit(inherit)
	d.specErrors(o, err, skip, nil)
	return l, err == nil && len(d.errs) == before
}

// readSpec reads the fields of o that a LimitSpec has into s, and returns the set of
// those it reported as unreadable.
func (d *decoder) readSpec(o *object, s *LimitSpec) (skip map[string]bool) {
	skip = map[string]bool{}
	var anchor int64
	for _, f := range []struct {
		name string
		str  *string
		num  *int64
	}{
		{"algorithm", &s.Algorithm, nil}, {"rate", nil, &s.Rate}, {"period", &s.Period, nil},
		{"burst", nil, &s.Burst}, {"lease", &s.Lease, nil}, {"zone", &s.Zone, nil}, {"anchor_day", nil, &anchor},
	} {
		v, ok := o.get(f.name)
		switch {
		case !ok:
		case f.str != nil:
			*f.str, ok = d.str(v, o.field(f.name))
		default:
			*f.num, ok = d.integer(v, o.field(f.name), math.MinInt64, math.MaxInt64)
		}
		if !ok && o.has(f.name) {
			skip[f.name] = true
		}
	}
	s.AnchorDay = int(max(min(anchor, 1<<20), -1<<20)) // out of range either way, and an int on every platform
	return skip
}

// specErrors reports the problems of a [LimitSpec.Limit] error at o's fields, named as
// in o (field renames a LimitSpec field), but for those in skip.
func (d *decoder) specErrors(o *object, err error, skip map[string]bool, field map[string]string) {
	for _, fe := range fieldErrors(err) {
		if skip[fe.Field] {
			continue
		}
		name := cmp.Or(field[fe.Field], fe.Field)
		n := o.node
		if v, ok := o.get(name); ok {
			n = v
		}
		d.errs = append(d.errs, &Error{Pos: d.pos(n), Field: o.field(name), Msg: fe.Msg, Err: fe.Err})
	}
}

// ParseCalendarUnit parses a calendar period's name as [sluice.CalendarUnit.String]
// prints it ("calendar_month"), case-insensitively.
func ParseCalendarUnit(s string) (u sluice.CalendarUnit, ok bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for u := sluice.CalendarDay; u <= sluice.CalendarYear; u++ {
		if s == u.String() {
			return u, true
		}
	}
	return 0, false
}

func (d *decoder) keySource(o *object) KeySource {
	v, ok := o.get("key")
	if !ok {
		return KeySource{Type: KeyIP}
	}
	field := o.field("key")
	var typeNode, headerNode *yaml.Node
	if v.Kind == yaml.ScalarNode {
		typeNode = v
	} else {
		ko := d.object(v, field, "type", "header")
		if ko == nil {
			return KeySource{}
		}
		typeNode, _ = ko.get("type")
		headerNode, _ = ko.get("header")
		if typeNode == nil {
			d.errorf(v, field+".type", "is required (ip, user or api_key)")
			return KeySource{}
		}
		field += ".type"
	}
	s, _ := d.str(typeNode, field)
	var ks KeySource
	switch strings.ToLower(s) {
	case "ip":
		ks.Type = KeyIP
	case "user":
		ks = KeySource{Type: KeyUser, Header: DefaultUserHeader}
	case "api_key", "api-key", "apikey":
		ks = KeySource{Type: KeyAPIKey, Header: DefaultAPIKeyHeader}
	default:
		d.errorf(typeNode, field, "unknown key type %q (want ip, user or api_key)", s)
		return ks
	}
	if headerNode != nil {
		hf := o.field("key") + ".header"
		if ks.Type == KeyIP {
			d.errorf(headerNode, hf, "does not apply to key type ip (the client address comes from the connection and trusted proxies)")
		} else if h, ok := d.header(headerNode, hf); ok {
			ks.Header = h
		}
	}
	return ks
}

// header returns a scalar that is an HTTP field name.
func (d *decoder) header(n *yaml.Node, path string) (string, bool) {
	s, ok := d.str(n, path)
	if ok && !validHeaderName(s) {
		d.errorf(n, path, "must be an HTTP header name, got %q", s)
		return "", false
	}
	return s, ok
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110 token).
func validHeaderName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
	})
}

// checkInherited reports the problems that depend on the whole configuration: an IP
// policy's override or identity tier naming a prefix its clients are never limited by.
func checkInherited(c *Config) Errors {
	var errs Errors
	for _, p := range c.Policies {
		check := func(id string, at written) {
			pfx, err := parsePrefix(id)
			if err != nil || at.node == nil || p.Key.Type != KeyIP {
				return
			}
			want := 32
			if pfx.Addr().Is6() {
				want = c.Identity.IPv6Prefix
			}
			if pfx.Bits() != want {
				m, _ := pfx.Addr().Prefix(want)
				errs = append(errs, &Error{
					Pos:   Position{File: p.Pos.File, Line: at.node.Line, Column: at.node.Column},
					Field: at.field,
					Msg:   fmt.Sprintf("never matches: clients are limited per /%d, so write ip:%s", want, keys.PrefixID(m)),
				})
			}
		}
		for _, o := range p.Overrides {
			check(o.ID, o.written)
		}
		for _, o := range p.IdentityTiers {
			check(o.ID, o.written)
		}
	}
	return errs
}
