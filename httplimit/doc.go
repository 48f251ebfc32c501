// Package httplimit is net/http middleware that rate-limits requests with any
// [sluice.Limiter] (the production stack of package stack, or a bare store) and reports the
// limits in the standard headers. docs/http.md is the guide: the headers by example, the
// responses, whom to trust, traces.
//
//	mw, err := httplimit.New(httplimit.Config{
//		Limiter: store,
//		Policies: []httplimit.Policy{
//			{Name: "per-ip", Limit: sluice.PerSecond(20), Key: httplimit.ByIP(clientIP)},
//			{Name: "search", Route: "GET /search", Limit: sluice.PerSecond(2), Key: httplimit.ByIP(clientIP)},
//		},
//	})
//	http.ListenAndServe(addr, mw.Handler(mux))
//
// # Which policies apply
//
// A policy applies to a request when its Route is empty or is the pattern that
// http.ServeMux would choose for the request among the Routes of its RouteSet (so
// "GET /items/{id}" and "/items/" never both apply: the more specific pattern wins, as in
// a ServeMux), matched on the path normalised as every front end of sluice normalises
// it: percent-decoded, ;parameters dropped, slashes merged, dot segments resolved, no
// trailing slash (a "/items/" subtree also matches "/items"), lower case; its Key returns a non-zero identity, and a Limit is found for the identity (override,
// then tier, then Policy.Limit; the zero Limit means "not limited").
//
// Each applying policy has its own store key, keys.Of(policy, identity, route, tier), so
// policies never share state, a route pattern's limit is shared by all the paths it
// matches, and a tier change starts the identity afresh under the new tier's limit.
// Every request costs 1 unit.
//
// # How the decision is made
//
// The applying policies of a request are one request to the Limiter, decided all or
// nothing by the evaluation `sluice serve` uses too: the request passes only if every
// enforced policy allows it, and a request denied by any policy spends nothing from any
// other. Shadow policies are decided after, each on its own, spending only when the request
// passed; they never block. A [sluice.Concurrency] policy's admitted request holds a lease
// until its handler returns (panics and departed clients included), or, when the release
// cannot reach the store, until the Limit's Lease has passed.
//
// # Headers and responses
//
// A decided request's response carries RateLimit-Policy and RateLimit
// (draft-ietf-httpapi-ratelimit-headers-11): RFC 9651 Lists with one String Item per decided
// enforced policy, in Config.Policies order (shadow ones only with Config.ShadowHeaders);
// q and w from the Limit (a bucket whose Burst exceeds its Rate as its bucket: Burst per
// refill time); r the Remaining; t the RetryAfter rounded up to whole
// seconds when positive, else the ResetAfter, each capped at Retry-After in a refusal; pk
// ([Policy.PartitionKey]) the identity as a Byte Sequence, an API key's MAC. A Concurrency
// policy has qu="concurrent-requests" and no w. A decision that failed open
// ([sluice.PathOpen]) is named in RateLimit-Policy only. Config.LegacyHeaders adds
// X-RateLimit-Limit, -Remaining and -Reset (delta-seconds) for the policy that denied with
// the longest wait, else the one with the least remaining.
//
// A denied request is answered by Config.Limited (by default 429, an RFC 9457 problem of
// type quota-exceeded) with Retry-After: the longest RetryAfter of the denying policies,
// rounded up, at least 1 second. A request that cannot be decided is never let through: a
// limiter error that is not bad input (a store down or closed, failover failing closed
// with [sluice.ErrStoreUnavailable], a canceled context) is answered by Config.Unavailable
// (503, Retry-After Config.UnavailableRetryAfter); wrap the Limiter in package failover to
// fail open or locally instead. Bad input (a KeyFunc error, wrapped in [ErrIdentify], or one
// for which [store.IsBadInput] holds) is a configuration bug, answered by Config.Error
// (500); nothing a client sends causes it. Neither sends RateLimit fields.
//
// # Trust
//
// This is sluice's one rule for what clients send; `sluice proxy` and every front end
// follow it. A request header that selects an identity, a tier, a cost or a priority is
// believed only from a trusted peer: a request sent straight by one of the
// keys.ClientIP's TrustedProxies, which must set the header on every request, replacing
// whatever the client sent. From any other peer the header is ignored, never an error,
// and the policy's own source applies:
//
//   - the client address: ByIP with a keys.ClientIP believes its one forwarding header
//     only from TrustedProxies (the zero ClientIP: the connection's peer);
//   - an identity (ByUser): what authentication established (a value an authentication
//     middleware put in the request's context), or a header read with TrustedHeader.
//     ByTrustedHeader keys a request from any other peer by its client address, so that
//     a client neither picks an identity nor escapes the policy;
//   - the tier (Config.Tier): TrustedHeader, a lookup from the identity (an account's
//     plan), or the context; else the policy's default. "X-Plan: pro" from a client
//     never turns a free limit into a pro one;
//   - the cost (Settle.EstimateFrom): TrustedHeader, else the policy's estimate. An
//     estimate is at least 1, and the actual cost the handler reports is charged
//     whatever was reserved;
//   - an API key is a credential, not a claim: it is the client's to present, and is
//     believed from anyone as far as it is secret. Its MAC keys the limit, so a client
//     that presents none, or a new made-up key, is limited by that policy only as a
//     stranger is: pair it with a per-IP policy.
//
// keys.ClientIP.Trusted is the one test of a trusted peer; TrustedHeader and
// ByTrustedHeader are the readings built on it. Per-identity overrides
// (Policy.Overrides) are a mapping from the identity: they apply to whoever the Key says
// the request is, never to what the request claims.
//
// # Secrets and traces
//
// API keys reach the middleware only through [ByAPIKey], which replaces them with their
// HMAC (keys.Hasher) before anything else sees them: store keys, log records, headers and
// Result hold only the MAC. With Config.TracerProvider each decision is one span,
// sluice.httplimit; without it nothing is traced or allocated.
package httplimit
