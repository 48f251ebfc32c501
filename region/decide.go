package region

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Decide implements sluice.Limiter: the limits of a request are decided on this node's
// shares, all or nothing, under the locks of all their entries. A limit this node has not
// seen recently waits for one sync (triggered at once) before its first decision; every
// other decision is in process. Decisions made while the shared Redis is unreachable have
// Path sluice.PathLocal.
func (g *Global) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	if err := store.CheckRequests(reqs, ds); err != nil {
		return sluice.Report{Kind: store.KindBadInput}, err
	}
	for i, r := range reqs {
		if err := checkBucket(r.Limit); err != nil {
			if len(reqs) > 1 {
				err = fmt.Errorf("request %d: %w", i, err)
			}
			return sluice.Report{Kind: store.KindBadInput}, err
		}
	}
	if err := store.CheckDistinct(reqs); err != nil {
		return sluice.Report{Kind: store.KindBadInput}, err
	}
	if g.closed.Load() {
		return sluice.Report{Kind: store.KindClosed}, fmt.Errorf("region: %w", sluice.ErrClosed)
	}
	var buf, orderBuf [4]*entry
	es := buf[:0]
	for _, r := range reqs {
		es = append(es, g.entry(r.Key, r.Limit))
	}
	for _, e := range es {
		if err := e.wait(ctx); err != nil {
			return sluice.Report{Kind: sluice.KindOf(err)}, err
		}
	}
	// One lock order for every caller: by key, then by limit.
	order := append(orderBuf[:0], es...)
	if len(order) > 1 {
		slices.SortFunc(order, func(a, b *entry) int {
			return cmp.Or(strings.Compare(a.id.key, b.id.key), strings.Compare(a.id.limit.String(), b.id.limit.String()))
		})
	}
	for _, e := range order {
		e.mu.Lock()
	}
	// A single request is decided and spent at once; several are looked at first, and
	// spent only if they all fit.
	now, one := g.now(), len(es) == 1
	all := true
	for i, e := range es {
		var fits bool
		ds[i], fits = g.decideLocked(e, reqs[i].Limit, reqs[i].N, now, one)
		all = all && fits
	}
	for i := 0; i < len(es) && !one; i++ {
		if all {
			ds[i], _ = g.decideLocked(es[i], reqs[i].Limit, reqs[i].N, now, true)
			continue
		}
		if ds[i].Allowed {
			// It alone would pass, but nothing is spent: report the state as it is.
			ds[i], _ = g.decideLocked(es[i], reqs[i].Limit, 0, now, false)
			ds[i].RetryAfter = 0
		}
		es[i].demand += reqs[i].N // denied units are demand, as when deciding one request
		ds[i].Allowed = false
	}
	for _, e := range order {
		e.mu.Unlock()
	}
	return sluice.Report{StoreCalled: true}, nil
}

// AllowN is Decide of one request.
func (g *Global) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Decision, error) {
	var d [1]sluice.Decision
	_, err := g.Decide(ctx, []sluice.Request{{Key: key, Limit: limit, N: n}}, d[:])
	return d[0], err
}

// Reserve implements sluice.Limiter. A node's share is credit granted by the last sync,
// not a schedule, so reservations are not offered: the error wraps
// sluice.ErrInvalidLimit.
func (g *Global) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	if err := store.CheckRequest(key, limit, n); err != nil {
		return sluice.Reservation{}, err
	}
	return sluice.Reservation{}, fmt.Errorf("%w: region.Global cannot reserve", sluice.ErrInvalidLimit)
}

var _ sluice.Limiter = (*Global)(nil)
