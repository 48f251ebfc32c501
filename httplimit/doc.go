// Package httplimit is net/http middleware that rate-limits requests with any
// [sluice.Limiter] (the production stack of package stack, or a bare store) and reports the
// limits in the standard headers. docs/http.md is the guide.
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
// A policy applies to a request when its Route is empty or is the pattern http.ServeMux
// would choose among its RouteSet's Routes, on the normalised path (package
// internal/route); its Key gives the identity and keys.Of the store key. The applying
// policies are one request to the Limiter, decided all or nothing: a request denied by
// any enforced policy spends nothing from any other, and shadow policies never block. A
// denial is answered by Config.Limited (429), a request that cannot be decided is never
// let through (Config.Unavailable, 503), and bad input is Config.Error's (500). With
// Config.Overload, an adaptive concurrency limit (package overload) admits each request,
// by its criticality, before the rate limits are decided; a shed request gets
// Config.Shed (503 temporary-reduced-capacity).
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
//   - the criticality under an overload limit (Config.Criticality): TrustedCriticality,
//     else the policies' and routes' criticality. "X-Criticality: critical" from a client
//     never takes the share of the limit kept for critical traffic;
//   - an API key is a credential, not a claim: it is the client's to present, and is
//     believed from anyone as far as it is secret. Its MAC keys the limit, so a client
//     that presents none, or a new made-up key, is limited by that policy only as a
//     stranger is: pair it with a per-IP policy.
//
// keys.ClientIP.Trusted is the one test of a trusted peer; TrustedHeader,
// ByTrustedHeader and TrustedCriticality are the readings built on it, and with
// Config.Trust the middleware takes that test once per request for all of them.
// Per-identity overrides apply to whoever the Key says the request is, never to what the
// request claims. API keys reach the middleware only through [ByAPIKey], which replaces
// them with their HMAC at once.
package httplimit
