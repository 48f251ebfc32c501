// Package server is the sluice rate limit service: Envoy's rate limit service (RLS) and
// Rate Limit Quota Service (RLQS) over gRPC, an HTTP JSON API, and health, metrics and
// admin endpoints, deciding with one sluice.Limiter against a configuration that may be
// reloaded while it serves. It is what `sluice serve` runs; [Proxy] is what `sluice
// proxy` runs.
//
//	st, err := stack.Open(watcher.Config(), stack.Options{RedisURL: url})
//	...
//	srv, err := server.New(server.Options{Limiter: st.Limiter(), Ready: st.Ready, Watcher: watcher})
//	...
//	err = srv.Serve(ctx, httpListener, grpcListener) // until ctx ends, then drains
//
// RLS answers as envoyproxy/ratelimit does at its default settings, for a configuration
// it reads unchanged, but for the differences docs/envoy.md lists (chief among them: a
// denied request spends nothing from any of its descriptors). No value a client shapes
// makes a call an error. RLQS divides each bucket's limit among the proxies reporting on
// it (package quota).
//
// The JSON API decides a [CheckRequest] under the store keys package httplimit uses, so
// the API, the proxy and an application's middleware share counters. Bad input is 400
// with an RFC 9457 problem body, never a store call. docs/service.md lists the endpoints.
//
// Every request reads the configuration in force once, so a reload never splits it.
package server
