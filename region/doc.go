// Package region holds limits across regions, where one Redis for every decision would put
// a cross-region round trip on every request. It offers two modes, both sluice.Limiter
// decorators; docs/regions-and-pacing.md has the measurements.
//
// # Per-region (Share)
//
// Each region decides against its own Redis (a redisstore.Store), under a configured
// fraction of the global limit: NewShare(regionStore, 0.5) in each of two regions. Nothing
// crosses regions, so a region's decisions cost what a local Redis costs and survive the
// loss of any other region. The price is static shares: a region whose traffic is below its
// share leaves the rest unused, and a busy one is limited to its share even while the
// others are idle. Use it when traffic per region is predictable (geo-pinned tenants) or
// when regions must be independent.
//
// # Global (Global)
//
// Each node decides in process from a leased share of every limit and reconciles with one
// shared Redis in the background: one pipelined round trip per sync interval carries, for
// every limit the node has used recently, its demand and admissions since the last sync and
// the share it applies, and returns its new share and the global usage.
//
// The protocol (the sync script, region/lua/sync.lua, runs atomically per limit):
//
//   - A node enforces its share w of the limit with internal/algo's GCRA, the bucket
//     limits' one state machine: ⌊w·Burst⌋ units deep (at least one while w > 0), on a
//     clock that runs at w of real time, so that it refills at w·Rate per Period. A new
//     share keeps what the bucket holds, up to the new depth. Shares are integers in parts
//     per million.
//   - The shared Redis keeps, per limit and node, the effective share e: the most that
//     node may be applying. The sum of e over live nodes never exceeds the whole limit.
//   - Each sync reports the share the node applies while the call is in flight and its
//     demand (units requested, admitted or not, per second). Redis computes max-min fair
//     targets from the demands (need = 1.1 × demand; the remainder split equally), grants
//     the node min(target, whole - Σ others' e), and sets its e = max(applied, grant). A
//     node applies a grant only when it arrives, so e covers both the share in flight and
//     the new one; a lower grant lowers e at the node's next sync, when it confirms it.
//     Shares therefore move from one node to another in two to three sync intervals.
//   - A limit no node has held for a lease plus the time to fill the bucket starts full:
//     the first node granted a share also gets its full share of the burst at once. Other
//     nodes' buckets start empty when their share starts or grows.
//   - A node that has not completed a sync for a lease (WithLease) fences itself: it applies
//     no share. Redis drops a node's record, freeing its share, 1.5 leases after its last
//     sync, so a cut node and its successors never apply the same share at once.
//
// Bound. At every instant the shares nodes apply sum to at most the limit, because each is
// at most its e and the e sum to at most the limit. A node admits in an interval of length d
// at most its bucket's content at the start plus its refill during it, so all nodes together
// admit at most Σ caps + Σ refills ≤ Burst + N + d·Rate/Period, where N counts the nodes
// whose share of the burst was rounded up to one unit (at most the number of nodes). So in
// any interval of length d the fleet admits at most
//
//	Burst + ⌊(d-1)·Rate/Period⌋ + N
//
// units (Burst + ⌊(d-1)/T⌋ + N when Rate divides Period, T = Period/Rate): what one limiter
// would admit (the bucket algorithms' bound), plus at most one unit per node, whatever the
// sync interval, the cross-region latency or the loss of the shared Redis. This is better than
// the nodes × rate × sync interval of optimistic schemes (each node decides on stale global
// counts), and it is paid for in utilisation instead: a node whose demand grows waits two
// to three sync intervals for shares to move to it, and bursts are split between nodes
// (bench/README.md has the utilisation measured at several sync intervals).
//
// When the shared Redis is unreachable, nodes keep deciding within their last known
// share, with Path sluice.PathLocal, until their lease runs out; then they deny until it is
// back. A limit a node has never seen waits for one sync before its first decision (an
// immediate sync, not the next tick); without the shared Redis that first decision is a
// denial.
//
// Only bucket limits (GCRA, TokenBucket, LeakyBucket, which decide alike) can be held
// globally: shares of a rate add up, shares of a window do not, so a window limit is an
// error wrapping sluice.ErrInvalidLimit. The shared state is one
// small hash per limit (one field per node), so global mode suits a bounded set of hot
// limits (per tenant, per upstream), not one per end user. It assumes node identities are
// unique and that the shared Redis keeps its data: if it loses it (a restart without
// persistence), nodes that still apply shares are unknown to it for up to one sync
// interval, and the bound can be exceeded by their shares for that long.
package region
