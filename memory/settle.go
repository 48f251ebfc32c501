package memory

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/store"
)

// reservations holds the records of decisions whose cost is to be settled, until their
// TTL passes; a settled one stays, so that a second settlement is told apart from an
// unknown one. At most max are kept (0: no bound; WithMaxReservations).
type reservations struct {
	mu      sync.Mutex
	m       map[reservationKey]reservation
	max     int
	dropped atomic.Uint64
}

type reservationKey struct {
	limit sluice.Limit
	key   string
	id    sluice.ReservationID
}

type reservation struct {
	r       algo.Reserved
	exp     int64 // µs on the store's clock
	settled bool
}

// record keeps the reservation of an allowed decision of req at now, r its Result, and
// returns its id.
func (rs *reservations) record(req *sluice.Request, now int64, r algo.Result) sluice.ReservationID {
	id := sluice.ReservationID(newLeaseID())
	rec := reservation{r: algo.ReservedOf(algo.ParamsOf(req.Limit), req.N, now, r), exp: now + req.SettleTTL.Microseconds()}
	rs.mu.Lock()
	if rs.m == nil {
		rs.m = make(map[reservationKey]reservation)
	}
	if rs.max > 0 && len(rs.m) >= rs.max {
		rs.mu.Unlock()
		rs.dropped.Add(1)
		return id
	}
	rs.m[reservationKey{req.Limit, req.Key, id}] = rec
	rs.mu.Unlock()
	return id
}

// claim marks the reservation settled and returns it, or the error that settling it is.
func (rs *reservations) claim(k reservationKey, now int64) (algo.Reserved, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rec, ok := rs.m[k]
	switch {
	case !ok || rec.exp <= now:
		return algo.Reserved{}, fmt.Errorf("%w: %s (never made, or past its settle TTL and standing at its estimate)", sluice.ErrUnknownReservation, k.id)
	case rec.settled:
		return algo.Reserved{}, fmt.Errorf("%w: %s", sluice.ErrSettled, k.id)
	}
	rec.settled = true
	rs.m[k] = rec
	return rec.r, nil
}

// sweep drops the records whose TTL has passed.
func (rs *reservations) sweep(now int64) {
	rs.mu.Lock()
	for k, rec := range rs.m {
		if rec.exp <= now {
			delete(rs.m, k)
		}
	}
	rs.mu.Unlock()
}

// Settle implements sluice.Limiter: algo.Settle on the key's state under its shard lock,
// then a look at the key.
func (s *Store) Settle(ctx context.Context, key string, limit sluice.Limit, reservation sluice.ReservationID, cost int64) (sluice.Decision, error) {
	if err := store.CheckSettle(key, limit, reservation, cost); err != nil {
		return sluice.Decision{}, err
	}
	ref, err := s.class(&limit)
	if err != nil {
		return sluice.Decision{}, err
	}
	u, ok := ref.c.(updater)
	if !ok { // every algorithm that settles has one; this guards a new one
		return sluice.Decision{}, fmt.Errorf("%w: %v cannot settle", sluice.ErrInvalidLimit, limit.Algorithm)
	}
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	now := s.now()
	r, err := s.res.claim(reservationKey{limit, key, reservation}, now)
	if err != nil {
		return sluice.Decision{}, err
	}
	p := u.params()
	u.update(key, s.hash(key), now, func(st algo.State, now int64) (algo.State, bool) {
		next := algo.Settle(st, now, p, r, cost)
		return next, next != st
	})
	if s.maxKeys > 0 && s.keys.Load() > s.maxKeys {
		s.evictOver(classKey{ref, key})
	}
	return s.AllowN(ctx, key, limit, 0)
}
