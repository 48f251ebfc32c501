// Package server is the sluice rate limit service: an HTTP JSON API, Envoy's rate limit
// service over gRPC, health, metrics and admin endpoints, all deciding with one
// sluice.Limiter against a configuration that can be reloaded while it serves. It is
// what `sluice serve` runs; Proxy is what `sluice proxy` runs.
//
//	st, err := stack.Open(watcher.Config(), stack.Options{RedisURL: url})
//	...
//	srv, err := server.New(server.Options{Limiter: st.Limiter(), Ready: st.Ready, Watcher: watcher})
//	...
//	err = srv.Serve(ctx, httpListener, grpcListener) // until ctx ends, then drains
//
// # Envoy's rate limit service
//
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit (go-control-plane's
// stubs) answers as the reference implementation, envoyproxy/ratelimit, does for a
// configuration it reads unchanged (package config):
//
//   - each descriptor is matched in the request's domain (config.Domain.Match): the most
//     specific rule wins; a descriptor's limit override replaces the configured limit
//     (fixed window, with unit_multiplier); rules named in another matched rule's
//     replaces are dropped;
//   - hits_addend: the descriptor's, else the request's, else 1; is_negative_hits only
//     looks (sluice spends nothing on denied requests, so there is nothing to refund);
//   - a descriptor named more than once in a request (two of a route's actions producing
//     the same one) is counted once per naming, as there: each status reports the
//     quota left after its naming and the ones before it, and a request whose namings
//     together exceed what the limit can ever allow is over the limit;
//   - overall_code is OVER_LIMIT when any descriptor that is not in shadow mode is over
//     its limit (with Options.ShadowMode, never);
//   - per descriptor: no rule (or a replaced one) is OK with no current_limit; unlimited
//     is OK with limit_remaining 4294967295 and never touches the store;
//     requests_per_unit 0 is OVER_LIMIT without touching the store; any other rule is
//     decided by the store and reports code, current_limit (name, requests_per_unit,
//     unit, unit_multiplier), limit_remaining (Decision.Remaining) and
//     duration_until_reset (Decision.RetryAfter when over the limit, the time after
//     which a retry passes; else Decision.ResetAfter, the time until the quota is whole).
//     A shadow_mode descriptor over its limit answers OK;
//   - response_headers_to_add carries RateLimit-Policy and RateLimit
//     (draft-ietf-httpapi-ratelimit-headers-11, one item per limit, named by the rule's
//     rate_limit name or full key) and, for OVER_LIMIT, Retry-After;
//   - an unknown domain limits nothing (every descriptor OK); an empty domain, no
//     descriptors, a descriptor without entries or an override with an unknown unit is
//     InvalidArgument;
//   - a request over Options.RequestLimits (store.request_limits: descriptors per call,
//     entries per descriptor, bytes of all keys and values) is InvalidArgument (HTTP 400
//     in the JSON API) before any work, and spends nothing; a gRPC message larger than
//     any request within the limits in force at start is refused (ResourceExhausted)
//     before it is decoded;
//   - no value a client shapes makes the call an error: a counter key longer than
//     keys.MaxStoreKeyLen is decided under its keys.Bound digest form.
//
// One difference is deliberate: a request that is over the limit spends nothing, from
// any of its descriptors. The enforced descriptors of a request are decided in one
// Decide call, all or nothing (package evaluator, shared with httplimit), so one
// exhausted descriptor does not eat the quota of the others; the reference counts every
// hit, even refused ones. Shadow descriptors are decided after, each on its own,
// spending only when the request passes (and looked at, cost 0, when it is denied).
// Two consequences, visible beside the reference: a
// descriptor of a denied request reports the quota it still has (the reference, 0 once
// it counted the refused hit), and one whose counter holds nothing reports
// duration_until_reset 0, its quota being whole (the reference, the time to its window's
// end). In a request denied before any store call (by a requests_per_unit 0 rule, or by
// a cost its limit can never allow), the other descriptors are looked at (cost 0), so
// one reports OK while it has any quota left. One more difference follows from the
// stores keeping state per key and Limit: a descriptor's limit override is counted apart
// from the configured rule of the same descriptor (the reference shares one counter
// between them), so a client whose override changes starts the new limit afresh.
//
// bench's TestReferenceConformance sends random requests to this server and to
// envoyproxy/ratelimit itself, and finds no other difference.
//
// When the store fails and a failover decorator fails closed, ShouldRateLimit answers
// OVER_LIMIT for every limited descriptor (an error would let Envoy's default
// failure_mode_deny: false allow the request). Other store errors are gRPC Unavailable,
// and Envoy applies its own failure mode.
//
// The gRPC server NewGRPCServer returns decodes ShouldRateLimit's request and encodes its
// answer with a codec of its own, to the same messages and bytes as gRPC's proto codec;
// every other message, and any request or answer holding a field it does not handle
// (unknown fields among them), goes to the proto codec.
//
// # Rate Limit Quota Service
//
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas, the
// protocol of Envoy's rate_limit_quota filter and gRPC's xDS client, is served on the same
// gRPC port. A proxy reports its usage per bucket; each report gets one response with one
// action per reported bucket, in the report's order, and the proxy enforces the actions
// itself: nothing is asked per request. Each stream is one client, named by a random id;
// its domain is that of its first report (config.QuotaDomain), and each bucket id is
// matched there (config.QuotaDomain.Match). Package quota divides a bucket's limit among
// its clients ([quota.Share]) in the store the stack opened (Options.Quota.Store), so that
// instances on one Redis divide it together.
//
// The answers:
//
//   - a matched bucket: quota_assignment_action with the rule's assignment_ttl and a
//     token_bucket (tokens_per_fill the client's share, fill_interval the rule's period,
//     max_tokens its part of the rule's burst, at least 1); DENY_ALL when the share is 0
//     (the bucket is taken by the other clients until they report);
//   - a rule with rate 0: DENY_ALL; an unlimited rule: ALLOW_ALL (both with its TTL);
//   - a bucket no rule matches, and every bucket of an unknown domain: ALLOW_ALL for
//     UnmatchedTTL, as the rate limit service answers OK for what it has no limit for
//     (counted in sluice_rlqs_bucket_actions_total and sluice_rlqs_unknown_domain_total);
//   - a malformed bucket id (empty, more than config.MaxBucketIDEntries entries, a key or
//     value over config.MaxBucketIDBytes), a bucket beyond the stream's
//     MaxBucketsPerStream, or a new client of a bucket already divided among
//     quota.MaxClients: abandon_action (the proxy falls back to its
//     no_assignment_behavior); nothing is kept for it;
//   - a first report without a domain, or a later report naming another domain: the
//     stream ends with INVALID_ARGUMENT (a later report may repeat the same domain, which
//     Envoy's client does);
//   - a stream that sends no report within FirstReportTimeout ends with
//     DEADLINE_EXCEEDED; a stream beyond MaxStreams is refused with RESOURCE_EXHAUSTED;
//   - when the store fails, the report is not answered (logged and counted): the proxy
//     keeps its assignments until their TTL, then applies its expired_assignment_behavior;
//   - a report larger than the gRPC message bound (which follows the request limits)
//     ends the stream with RESOURCE_EXHAUSTED before it is decoded.
//
// Demand is allowed + denied over the report's time_elapsed (one period when absent). A
// client that closes its stream keeps its share until its TTL, since the proxy may keep
// enforcing it; a reconnected proxy is a new client, which gets what is left at once and
// its full share once the old one lapsed.
//
// no_assignment_behavior and expired_assignment_behavior are filter settings; a rule
// writes what its proxies are meant to be configured with, and maps to the filter's
// RateLimitQuotaBucketSettings as:
//
//	reporting_interval                 -> reporting_interval
//	no_assignment: allow | deny        -> no_assignment_behavior.fallback_rate_limit
//	                                      .blanket_rule ALLOW_ALL | DENY_ALL
//	expired_assignment: allow | deny   -> expired_assignment_behavior.fallback_rate_limit
//	                                      .blanket_rule ALLOW_ALL | DENY_ALL
//	expired_assignment: reuse_last     -> expired_assignment_behavior.reuse_last_assignment
//
// The overshoot bound (bench/README.md) needs expired_assignment deny, the default: a
// proxy cut off from the service stops admitting when its share lapses, which is when
// the service gives that share to others.
//
// Metrics: sluice_rlqs_clients (streams open), sluice_rlqs_buckets (distinct buckets they
// report on), sluice_rlqs_assigned_rate{domain,bucket} (requests per second assigned to
// all clients of a bucket, at its last rebalance here), sluice_rlqs_reported_requests_total
// {domain,bucket,result}, sluice_rlqs_bucket_actions_total{action}. Labels name rules,
// never bucket id values. The decision log has one "rlqs rebalance" line per bucket
// rebalanced (info when the client's share moved, debug when not), with the bucket's
// digest, never its id values.
//
// # HTTP JSON API
//
//	POST /v1/check    decide a CheckRequest: 200 and the CheckResponse when allowed, 429
//	                  when denied (Retry-After, RateLimit-Policy, RateLimit)
//	POST /v1/peek     the same, spending nothing; always 200
//	GET  /v1/peek     ?policy=&key=&tier=&method=&path= or ?domain=&descriptor=k=v,k2=v2
//	POST /v1/release  give back a concurrency limit's lease: {"policy", "key", "lease"}
//	POST /v1/settle   settle a reservation at its actual cost: {"policy", "key",
//	                  "reservation", "cost"}; 404 unknown or expired, 409 settled already
//	GET  /v1/usage    the peek's parameters: every limit that would apply, with used,
//	                  remaining, reset and source, spending nothing (a dashboard's call)
//	POST /v1/reset    forget the state of a CheckRequest's limits (admin)
//	GET  /v1/config   the configuration in force, secrets redacted, and the API
//	                  overrides in force (admin)
//	PUT, GET, DELETE /v1/overrides/{policy}/{identity}
//	                  set (OverrideRequest), read, remove a limit set at run time (admin)
//	GET  /v1/overrides?policy=P
//	                  list the overrides in force (admin)
//	GET  /healthz     200 while the process serves (liveness)
//	GET  /readyz      200 when the store answers a ping and the server is not draining;
//	                  503 otherwise, with the reason ("store misconfigured" when the
//	                  store refuses its settings: sluice.KindMisconfigured)
//	GET  /metrics     Prometheus metrics: the server's, the observe decorator's if it was
//	                  registered on Options.Registry, Go and process collectors
//
// A CheckRequest names a sluice policy and the identity it limits (client IP, user ID or
// raw API key, hashed at once with HMAC-SHA256 and never stored or logged), or an Envoy
// domain and descriptors. For a policy, the limit is the identity's override set through
// /v1/overrides (source "api_override"), else its configured override, else its tier's,
// else the policy's; a method and path matching one of the policy's routes add
// the route's limit, decided atomically with it. The store keys are those the httplimit
// middleware uses, so the JSON API, `sluice proxy` and an application's middleware on
// the same store share counters. A cost the limit can never allow is 400 (it is an error
// in sluice, not a denial); bad input is 400 with an RFC 9457 problem body, an unknown
// policy 404, and a store that is down (or fails closed) 503 with Retry-After.
//
// A check under a concurrency policy returns the lease it took ("lease" in the limit's
// status), which the client releases with /v1/release when its work is done (else it
// expires after the policy's lease). A check with a cost under a policy with a settle
// block returns a "reservation", settled with /v1/settle (else the cost checked stands
// after the block's ttl). Envoy's RLS has no call at a request's end, so its domains hold
// no concurrency limits (docs/concurrency-and-settlement.md).
//
// Admin endpoints need "Authorization: Bearer <token>". The token comes from
// Options.AdminToken, else the configuration's admin block (an environment variable or
// a file, read on every request so it can rotate), else $SLUICE_ADMIN_TOKEN; it is
// compared in constant time and never logged. Without a token every admin request is
// refused with 403.
//
// # Overrides at run time
//
// PUT /v1/overrides/{policy}/{identity} with {"rate", "period", "burst"?, "algorithm"?,
// "zone"?, "anchor_day"?, "expires_in"?, "reason"?} sets a limit for one identity (or a
// pattern) of a policy, ahead of the configuration. The identity is written raw (an IP
// address or prefix, a user ID, an API key, which is hashed on arrival and never kept),
// or as the decision log prints it: a store key "policy:kind:id:route:tier" or the
// identity "kind:id". A trailing '*' makes a pattern over user IDs or IPs ("org-42:*";
// "*" alone is every identity); the most specific override wins: an exact identity before
// every pattern, then the longest pattern. The algorithm defaults to the policy's (to
// fixed_window for a calendar period). Bad input is 400 naming the field ("rate:",
// "period:", "identity:", "policy:", ...) and changes nothing.
//
// Overrides live in Options.Overrides: on Redis one hash and a version counter
// (override.Redis), polled every Options.OverrideRefresh (500 ms), so every replica
// applies a change within a second and they survive restarts; on memory in the process.
// An override with expires_in stops applying at that instant and is deleted at the next
// refresh. Every change is logged at Info ("override set", "override removed",
// "override expired": policy, identity, by (the admin token's source, never the token),
// before, after, reason) and counted in sluice_server_override_changes_total{action}.
// The proxy (`sluice proxy`, ProxyOptions.Overrides) applies them too, ahead of the
// configuration's, refreshing as requests come.
//
// # TLS
//
// With Options.TLS both listeners speak TLS: HTTPS, with HTTP/2 and HTTP/1.1 offered by
// ALPN, and gRPC over TLS. A certificate that rotates without a restart comes from the
// configuration's GetCertificate (`sluice serve --tls-cert` re-reads its files when they
// change), and mutual TLS from its ClientAuth: it then applies to every endpoint, so
// health probes must present a client certificate too (or use an exec probe running
// `sluice check`).
//
// # Configuration and reload
//
// Every request reads the configuration in force once (config.Watcher.Config, an
// atomic load), so a reload never splits a request between two configurations and never
// blocks one. An invalid configuration is rejected by the Watcher and the previous one
// stays; the reloads and rejections are exported as sluice_config_reloads_total and
// sluice_config_reload_rejected_total. The store itself (memory or Redis, its URL) is
// chosen at start; a reload that changes it takes effect at the next start.
//
// # Failure modes
//
// Each limit carries its failure mode in its request (sluice.Request.Failure), for the
// failover layer of the stack, resolved by config.Config.Failure: the policy's own mode,
// else Options.FailureMode (the --failure-mode flag), else the configuration's
// store.failure_mode, else open. Envoy domains have no mode of their own. Each limit also carries its policy's (or domain's) name, for the
// decision log and the metrics.
//
// # Traces
//
// With Options.TracerProvider set, every decision request is one OpenTelemetry span:
// sluice.ShouldRateLimit, sluice.check, sluice.peek or sluice.usage, with attributes
// sluice.domain (Envoy) or sluice.policy, sluice.result (allowed, denied or error),
// sluice.path (how the enforced limits were decided: store, cache, open, closed or local;
// absent when the store was not asked), sluice.store_latency_ms, and sluice.error_kind
// (the sluice.ErrorKind) when the store failed. Its parent is the span of the request's
// context, else the W3C traceparent of the HTTP request or of the gRPC metadata. The
// Proxy's spans are httplimit's (sluice.httplimit), and it sends the decision span's
// traceparent upstream. Without a TracerProvider nothing is traced and nothing is
// allocated for it.
//
// # Shutdown
//
// When Serve's context ends, /readyz and the gRPC health service turn to not serving,
// the listeners close, requests in flight are finished (at most ShutdownTimeout), and
// Serve returns; the caller then closes the store.
package server
