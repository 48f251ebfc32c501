// Package region holds limits across regions, where one Redis for every decision would put
// a cross-region round trip on every request. It offers two modes, both sluice.Limiter
// decorators; docs/regions-and-pacing.md has the protocol, its bound and the measurements.
//
// # Per-region (Share)
//
// Each region decides against its own Redis (a redisstore.Store), under a configured
// fraction of the global limit: NewShare(regionStore, 0.5) in each of two regions. Nothing
// crosses regions, so a region's decisions survive the loss of any other region; the
// price is static shares. Use it when traffic per region is predictable or when regions
// must be independent.
//
// # Global (Global)
//
// Each node decides in process from a leased share of every limit, enforced with
// internal/algo's GCRA, and reconciles with one shared Redis in the background
// (region/lua/sync.lua, one pipelined round trip per sync interval). Shares in force
// never sum to more than the limit, so in any interval of length d the fleet admits at
// most
//
//	Burst + ⌊(d-1)·Rate/Period⌋ + N
//
// units, N the number of nodes, whatever the sync interval, the cross-region latency or
// the loss of the shared Redis. A node that has not synced for a lease ([WithLease])
// fences itself; until then it decides within its last share with Path sluice.PathLocal.
// A limit a node has never seen waits for one sync before its first decision (a denial
// without the shared Redis). Only bucket limits (GCRA, TokenBucket, LeakyBucket) can be
// held globally; a window limit is an error wrapping sluice.ErrInvalidLimit. Node
// identities must be unique, and the shared Redis must keep its data.
package region
