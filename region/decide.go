package region

import (
	"context"
	"fmt"
	"sort"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// Decide implements sluice.Limiter: the limits of a request are decided on this node's
// shares, all or nothing, under the locks of all their entries. A limit this node has not
// seen recently waits for one sync first, as in AllowN.
func (g *Global) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	if err := store.CheckRequests(reqs, ds); err != nil {
		return sluice.Report{Kind: store.KindBadInput}, err
	}
	if len(reqs) == 1 {
		d, err := g.AllowN(ctx, reqs[0].Key, reqs[0].Limit, reqs[0].N)
		if err == nil {
			ds[0] = d
		}
		return sluice.Report{StoreCalled: err == nil, Kind: sluice.KindOf(err)}, err
	}
	if g.closed.Load() {
		return sluice.Report{}, fmt.Errorf("region: %w", sluice.ErrClosed)
	}
	type held struct {
		e *entry
		i int
	}
	hs := make([]held, len(reqs))
	seen := make(map[entryKey]int, len(reqs))
	for i, r := range reqs {
		if err := checkBucket(r.Limit); err != nil {
			return sluice.Report{Kind: store.KindBadInput}, fmt.Errorf("request %d: %w", i, err)
		}
		k := entryKey{r.Key, r.Limit}
		if j, dup := seen[k]; dup {
			return sluice.Report{Kind: store.KindBadInput}, fmt.Errorf("%w: request %d repeats the key and limit of request %d", sluice.ErrInvalidKey, i, j)
		}
		seen[k] = i
		e, fresh := g.entry(r.Key, r.Limit)
		if fresh {
			select {
			case g.wake <- struct{}{}:
			default:
			}
		}
		hs[i] = held{e, i}
	}
	for _, h := range hs {
		select {
		case <-h.e.ready:
		case <-ctx.Done():
			return sluice.Report{}, fmt.Errorf("region: waiting for the first sync: %w", ctx.Err())
		}
	}
	// One lock order for every caller: by key, then by limit.
	order := append([]held(nil), hs...)
	sort.Slice(order, func(a, b int) bool {
		ra, rb := &reqs[order[a].i], &reqs[order[b].i]
		if ra.Key != rb.Key {
			return ra.Key < rb.Key
		}
		return ra.Limit.String() < rb.Limit.String()
	})
	for _, h := range order {
		h.e.mu.Lock()
	}
	defer func() {
		for _, h := range order {
			h.e.mu.Unlock()
		}
	}()
	now := g.now()
	all := true
	for i, h := range hs {
		var fits bool
		ds[i], fits = g.decideLocked(h.e, reqs[i].Limit, reqs[i].N, now, false)
		all = all && fits
	}
	for i, h := range hs {
		if all {
			ds[i], _ = g.decideLocked(h.e, reqs[i].Limit, reqs[i].N, now, true)
			continue
		}
		if ds[i].Allowed {
			// It alone would pass, but nothing is spent: report the state as it is.
			ds[i], _ = g.decideLocked(h.e, reqs[i].Limit, 0, now, false)
			ds[i].RetryAfter = 0
		}
		h.e.demand += reqs[i].N // denied units are demand, as in AllowN
		ds[i].Allowed = false
	}
	return sluice.Report{StoreCalled: true}, nil
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
