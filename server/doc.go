// Package server is the sluice rate limit service: Envoy's rate limit service (RLS) and
// Rate Limit Quota Service (RLQS) over gRPC, an HTTP JSON API, and health, metrics and
// admin endpoints, all deciding with one sluice.Limiter against a configuration that can
// be reloaded while it serves. It is what `sluice serve` runs; [Proxy] is what `sluice
// proxy` runs.
//
//	st, err := stack.Open(watcher.Config(), stack.Options{RedisURL: url})
//	...
//	srv, err := server.New(server.Options{Limiter: st.Limiter(), Ready: st.Ready, Watcher: watcher})
//	...
//	err = srv.Serve(ctx, httpListener, grpcListener) // until ctx ends, then drains
//
// RLS answers as the reference implementation, envoyproxy/ratelimit, answers at its
// default settings for a configuration it reads unchanged, but for a documented list of
// differences, chief among them that a denied request spends nothing from any of its
// descriptors. No value a client shapes makes a call an error; when the store fails and
// the failure mode is closed, every limited descriptor is OVER_LIMIT. RLQS divides each
// bucket's limit among the proxies reporting on it (package quota) and answers every
// report with one action per bucket. docs/envoy.md states both answers in full, with the
// differences and the reference's settings.
//
// The JSON API decides a [CheckRequest] under a sluice policy or an Envoy domain with
// the same store keys as package httplimit, so the API, the proxy and an application's
// middleware share counters. Bad input is 400 with an RFC 9457 problem body, never a
// store call; admin endpoints need the admin token. docs/service.md lists the endpoints,
// run-time overrides, TLS, reload, failure modes, traces and shutdown.
//
// Every request reads the configuration in force once, so a reload never splits a
// request between two configurations. When Serve's context ends, /readyz turns to not
// serving, requests in flight finish within ShutdownTimeout, and Serve returns; the
// caller then closes the store.
package server
