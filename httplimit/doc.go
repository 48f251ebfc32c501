// Package httplimit is net/http middleware that rate-limits requests with any
// sluice.Limiter (the production stack of package stack, or a bare store), and reports the
// limits in the standard headers.
//
//	mw, err := httplimit.New(httplimit.Config{
//		Limiter: store,
//		Policies: []httplimit.Policy{
//			{Name: "per-ip", Limit: sluice.PerSecond(20), Key: httplimit.ByIP(clientIP)},
//			{Name: "per-key", Tiers: map[string]sluice.Limit{"free": sluice.PerMinute(60), "pro": sluice.PerMinute(600)},
//				Key: httplimit.ByAPIKey(hasher, httplimit.Header("X-API-Key"))},
//			{Name: "search", Route: "GET /search", Limit: sluice.PerSecond(2), Key: httplimit.ByIP(clientIP)},
//		},
//		Tier: tierOf,
//	})
//	http.ListenAndServe(addr, mw.Handler(mux))
//
// Handler has the shape func(http.Handler) http.Handler, so it plugs into net/http, chi
// (r.Use(mw.Handler)), gorilla/mux and alice as is; examples/ shows gin and echo.
//
// # Which policies apply
//
// A policy applies to a request when its Route is empty or is the pattern that
// http.ServeMux would choose for the request among all the policies' Routes (so
// "GET /items/{id}" and "/items/" never both apply: the more specific pattern wins, as in
// a ServeMux; a non-canonical path such as "/items//7" matches as its canonical form),
// its Key returns a non-zero identity, and a Limit is found for the identity (override,
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
// nothing (package stack builds the Limiter the service uses; the evaluation is the one
// `sluice serve` uses too): the request passes only if every enforced policy allows it,
// and a request denied by any policy spends nothing from any other. Shadow policies are
// decided after, each on its own, spending only when the request passed; they never
// block, are logged (Warn when they would deny), and their errors are logged and
// ignored. Each policy's Name and Failure travel with its limit, for the decision log,
// the metrics and the failure mode of the layers below.
//
// A policy with a sluice.Concurrency limit admits a request only while fewer than its Rate
// requests of the client are in its handler: the admitted request holds a lease
// (Decision.Lease), which the middleware releases when the handler returns, panics
// included, and also when the client has gone away (the release does not use the
// request's context). A lease the release cannot reach (a store failure, a killed
// process) expires by its TTL, Limit.Lease.
//
// # Headers (draft-ietf-httpapi-ratelimit-headers-11)
//
// Every response to a decided request carries RateLimit-Policy and RateLimit, RFC 9651
// Lists with one Item per decided enforced policy, in Config.Policies order, each a
// String naming the policy (shadow policies stay out unless Config.ShadowHeaders: a
// client that obeys a shadow policy's r=0 would stop although nothing is enforced):
//
//	RateLimit-Policy: "per-ip";q=20;w=1, "per-key";q=60;w=60;pk=:YXBpX2tleTo...:
//	RateLimit: "per-ip";r=19;t=1, "per-key";r=0;t=3;pk=:YXBpX2tleTo...:
//
// q and w come from the applied Limit (see Quota: Rate per Period, in whole seconds). r is
// Decision.Remaining. t is Decision.RetryAfter rounded up to whole seconds when it is
// positive (a denied policy: r is 0 until then), else Decision.ResetAfter rounded up (the
// time until the quota is whole again). In a refusal every t is capped at Retry-After, so
// Retry-After never points before the end of an effective window (§6). A decision that
// failed open (Decision.Path sluice.PathOpen: the store was down) is named in
// RateLimit-Policy but left out of RateLimit and the legacy fields: its quota is
// unknown, and r=0 would tell clients to stop while every request is allowed. pk, when
// Policy.PartitionKey is set, is the identity "kind:id" as a Byte Sequence; for API keys
// it holds the MAC, never the key. A Concurrency policy is advertised as
// "name";q=<Rate>;qu="concurrent-requests", without w (the draft's quota unit for requests
// in flight); its r is the free slots and, in a refusal, t is the time until the oldest
// lease expires, an upper bound (a holder may finish sooner).
//
// With Config.LegacyHeaders, X-RateLimit-Limit (q), X-RateLimit-Remaining (r) and
// X-RateLimit-Reset (t, in delta-seconds, not a timestamp) describe one policy: the
// enforced one that denied with the longest wait, else the one with the least remaining
// (ties: the longest t).
//
// # Responses
//
// A denied request gets Retry-After in delay-seconds: the longest RetryAfter of the
// policies that denied it, rounded up and at least 1, so a client that waits that long
// and retries is allowed (if nothing else spent its quota meanwhile). The body is written
// by Config.Limited, by default a 429 application/problem+json (RFC 9457) of type
// quota-exceeded whose violated-policies lists the denying policies.
//
// A request that cannot be decided is never let through by this package:
//
//   - a limiter error wrapping sluice.ErrStoreUnavailable (a failover decorator failing
//     closed), and any other limiter error that is not bad input (a store that is down or
//     closed, a canceled context), is answered by Config.Unavailable, by default 503 with
//     Retry-After: Config.UnavailableRetryAfter (1 second by default). To fail open or fall
//     back to a local limit when the store is down, wrap the Limiter in a failover
//     decorator; the decision it returns is then used like any other.
//   - bad input, that is a KeyFunc error (wrapped in ErrIdentify, e.g. a Unix-socket peer
//     with no IP) or a limiter error for which sluice.IsBadInput is true (an invalid limit),
//     is answered by Config.Error, by default 500 with a problem body. Bad input is a bug
//     in the configuration, never the client's doing, and never fails open. What a client
//     shapes cannot cause it: an over-long identity (a header of any length) is decided
//     under its keys.Bound form, like any other.
//
// No RateLimit fields are sent in those cases: there was no decision to report.
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
// # Traces
//
// With Config.TracerProvider set, each request's decision is one OpenTelemetry span,
// sluice.httplimit: a child of the span in the request's context (otelhttp's, say), else
// of the request's W3C traceparent header. It carries sluice.policy (the applying
// policies' names, comma-separated), sluice.result (allowed, denied or error),
// sluice.path (store, cache, open, closed or local), sluice.store_latency_ms and, when the
// store failed, sluice.error_kind. The next handler's request carries the span's context,
// so a reverse proxy can send its traceparent upstream. Without a TracerProvider nothing
// is traced and nothing is allocated for it.
//
// # Secrets
//
// API keys reach the middleware only through ByAPIKey, which replaces them with their
// HMAC (keys.Hasher) before anything else sees them: store keys, log records, headers and
// Result hold only the MAC.
package httplimit
