// Package server is the sluice rate limit service: Envoy's rate limit service (RLS) and
// Rate Limit Quota Service (RLQS) over gRPC, an HTTP JSON API, and health, metrics and
// admin endpoints, all deciding with one sluice.Limiter against a configuration that can
// be reloaded while it serves. It is what `sluice serve` runs; Proxy is what `sluice
// proxy` runs. This page is the contract; docs/envoy.md (Envoy, the reference
// implementation's settings, the conformance tests) and docs/service.md (the JSON API,
// run-time overrides) are the guides.
//
//	st, err := stack.Open(watcher.Config(), stack.Options{RedisURL: url})
//	...
//	srv, err := server.New(server.Options{Limiter: st.Limiter(), Ready: st.Ready, Watcher: watcher})
//	...
//	err = srv.Serve(ctx, httpListener, grpcListener) // until ctx ends, then drains
//
// # Envoy's rate limit service
//
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit answers as the reference
// implementation, envoyproxy/ratelimit, answers at its default settings for a
// configuration it reads unchanged (package config), but for the differences listed next:
//
//   - Each descriptor is matched in the request's domain (config.Domain.Match); a limit
//     override replaces the configured limit; a rule named in another matched rule's
//     replaces is dropped. An unknown domain limits nothing (every descriptor OK).
//   - Hits: the descriptor's hits_addend, else the request's, else 1 (0 with
//     is_negative_hits). A descriptor named twice in a request counts once per naming;
//     each status reports the quota left after its naming and the ones before it.
//   - overall_code is OVER_LIMIT when a descriptor that is neither shadow_mode nor
//     quota_mode is over its limit; with Options.ShadowMode (the reference's SHADOW_MODE),
//     always OK, the statuses unchanged.
//   - A descriptor without a rule, or with a replaced one: OK, no current_limit,
//     limit_remaining 0. Unlimited: OK, limit_remaining 4294967295, no store call.
//     requests_per_unit 0: OVER_LIMIT, limit_remaining 0, no store call. Otherwise the
//     store decides: code, current_limit (name, requests_per_unit, unit, and the
//     override's unit_multiplier), limit_remaining. shadow_mode over its limit answers OK;
//     quota_mode over its limit answers OK without duration_until_reset.
//   - duration_until_reset, for every descriptor with a current_limit, is whole seconds
//     computed as the reference's utils.CalculateReset: the unit's length (times the
//     unit_multiplier) less the Unix time in seconds modulo it, whatever the counter
//     holds. A calendar rule (a sluice extension) counts to its period's end; a rule of
//     another algorithm (a sluice extension) reports the decision's RetryAfter when over,
//     else its ResetAfter, rounded up.
//   - response_headers_to_add is empty unless Options.RLSHeaders asks: Reference adds the
//     reference's LIMIT_RESPONSE_HEADERS_ENABLED headers (requests_per_unit,
//     limit_remaining and duration_until_reset of the last descriptor over its limit,
//     else of the first with the least limit_remaining), IETF adds RateLimit-Policy and
//     RateLimit (draft-ietf-httpapi-ratelimit-headers-11, one item per limit the store
//     decided, shadow ones only with Options.ShadowHeaders) and, on OVER_LIMIT, Retry-After.
//   - A descriptor without entries matches no rule (with a limit override, it is counted
//     under the domain alone). An empty domain, no descriptors, an override with an
//     unknown unit, and a request over Options.RequestLimits (store.request_limits) are
//     InvalidArgument, before any work; a gRPC message larger than any request within the
//     limits in force at start is ResourceExhausted, before it is decoded. No value a
//     client shapes makes the call an error: a counter key longer than
//     keys.MaxStoreKeyLen is decided under its keys.Bound form.
//   - When the store fails and the failure mode is closed, every limited descriptor is
//     OVER_LIMIT (an error would let Envoy's default failure_mode_deny: false allow the
//     request); other store errors are Unavailable, and Envoy applies its failure mode.
//
// Where sluice answers differently, and why:
//
//   - A denied request spends nothing, from any of its descriptors: they are decided in
//     one Decide call, all or nothing (package evaluator, shared with httplimit), so an
//     exhausted limit does not eat the others' quota. The reference counts every hit,
//     refused ones too. So a descriptor of a denied request reports the quota it still
//     has (there, 0 once the refused hit is counted), only the descriptors that do not
//     fit are OVER_LIMIT, and the counters it names hold less than the reference's after.
//   - A request denied before any store call (a requests_per_unit 0 rule, or namings of
//     one limit that together exceed it) looks at its other descriptors, cost 0: one is
//     OVER_LIMIT only when nothing is left of it.
//   - shadow_mode and quota_mode descriptors are decided after the others, each alone:
//     spent when the request passed and they fit, looked at (cost 0) otherwise, for the
//     same reason.
//   - A store keeps state per (key, limit), so a limit override with another limit than
//     the configured rule's counts apart from it (the reference keeps one counter per
//     descriptor and window start, whatever the limit).
//   - A limit override's unit_multiplier is honoured (a window of unit × multiplier,
//     echoed in current_limit); the reference, at the version bench tests against,
//     ignores the field.
//   - is_negative_hits spends nothing and reports the state (returning quota is not part
//     of sluice's model: a denied request spent nothing to return); the reference ignores
//     the field and spends the hits.
//   - Refusals carry gRPC codes (InvalidArgument, ResourceExhausted, Unavailable); the
//     reference's are Unknown (an empty domain or descriptor list: the same message).
//   - Past the failover deadline (store.deadline, --deadline) the failure mode decides;
//     the reference waits for Redis (REDIS_TIMEOUT) and fails the call.
//
// bench's TestReferenceConformance and TestReferenceScenarios compare whole answers with
// the reference's and encode these differences; they find no other.
//
// The reference's other settings that change an answer (docs/envoy.md maps every one):
//
//	STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT  no such setting: sluice always spends nothing of a
//	                                         denied request (the reference with it still counts
//	                                         the refused hit of the descriptor that goes over)
//	LOCAL_CACHE_SIZE_IN_BYTES                the deny cache (package denycache) answers repeats of
//	                                         a denial in-process, with the store's answer; the
//	                                         reference's local cache answers limit_remaining 0
//	NEAR_LIMIT_RATIO                         changes no answer there (a statistic); none here
//	QUOTA_MODE (global)                      not supported; quota_mode per descriptor is
//	RESPONSE_DYNAMIC_METADATA                not supported: no dynamic_metadata is sent
//	MERGE_DOMAIN_CONFIG                      not supported (package config)
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
// no_assignment_behavior and expired_assignment_behavior are filter settings: a rule
// writes what its proxies are meant to be configured with (docs/envoy.md maps them). The
// overshoot bound (docs/envoy.md) needs expired_assignment deny, the default. The RLQS
// metrics and log lines are listed in docs/envoy.md.
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
//	                  store refuses its settings: store.KindMisconfigured)
//	GET  /metrics     Prometheus metrics: the server's, the observe decorator's if it was
//	                  registered on Options.Registry, Go and process collectors
//
// A CheckRequest names a sluice policy and the identity it limits, or an Envoy domain and
// descriptors. A policy's limit is the identity's run-time override, else its configured
// override, else its tier's, else the policy's, with the limit of a matching route
// decided atomically beside it; the store keys are httplimit's, so the JSON API, `sluice
// proxy` and an application's middleware share counters. A raw API key is hashed with
// HMAC-SHA256 at once and never stored or logged. Bad input, and a cost the limit can
// never allow, are 400 with an RFC 9457 problem body; an unknown policy or domain 404; a store that
// is down (or fails closed) 503 with Retry-After. Leases and reservations:
// docs/concurrency-and-settlement.md (Envoy's domains hold no concurrency limits).
//
// Admin endpoints need "Authorization: Bearer <token>", from Options.AdminToken, else
// the configuration's admin block (read on every request), else $SLUICE_ADMIN_TOKEN,
// compared in constant time and never logged; without a token they answer 403.
//
// # Overrides at run time
//
// PUT /v1/overrides/{policy}/{identity} sets a limit for one identity, or a pattern with
// a trailing '*', ahead of the configuration; the most specific wins (an exact identity,
// then the longest pattern). Bad input is 400 naming the field and changes nothing. They
// live in Options.Overrides (on Redis: shared by every replica, polled every
// Options.OverrideRefresh; on memory: in the process), stop applying at their
// expires_in, and every change is logged and counted. The proxy applies them too.
// docs/service.md has the request body, the identity forms and the log lines.
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
