package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/store"
)

// Reserve implements sluice.Limiter for GCRA, TokenBucket and LeakyBucket limits:
// algo.ReserveGCRA on the key's state, and algo.CancelReservation for Cancel. Delay is on
// the store's clock; At is time.Now() plus Delay.
func (s *Store) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	ref, err := s.check(key, &limit, n)
	if err != nil {
		return sluice.Reservation{}, err
	}
	if !algo.CanReserve(limit.Algorithm) {
		return sluice.Reservation{}, fmt.Errorf("%w: %v cannot reserve; pacing needs gcra, token_bucket or leaky_bucket", sluice.ErrInvalidLimit, limit.Algorithm)
	}
	u, ok := ref.c.(updater)
	if !ok { // every reservable algorithm's class implements it; this guards a new one
		return sluice.Reservation{}, fmt.Errorf("%w: %v cannot reserve", sluice.ErrInvalidLimit, limit.Algorithm)
	}
	if s.closed.Load() {
		return sluice.Reservation{}, sluice.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return sluice.Reservation{}, err
	}
	maxWait := int64(-1)
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = max(time.Until(deadline).Microseconds(), 0)
	}
	h := s.hash(key)
	var r algo.Reservation
	p := u.params()
	u.update(key, h, s.now(), func(st algo.State, now int64) (algo.State, bool) {
		st, r = algo.ReserveGCRA(st, now, p, n, maxWait)
		return st, r.OK && r.After != r.Before
	})
	if ref.gone.Load() { // the sweeper retired the class meanwhile: nothing was kept
		return s.Reserve(ctx, key, limit, n)
	}
	if s.maxKeys > 0 && s.keys.Load() > s.maxKeys {
		s.evictOver(classKey{ref, key})
	}
	delay := time.Duration(r.Delay) * time.Microsecond
	res := sluice.Reservation{OK: r.OK, Limit: limit, N: n, Delay: delay, At: time.Now().Add(delay)}
	if !r.OK || r.After == r.Before {
		return res, nil
	}
	return store.WithCancel(res, func(ctx context.Context) (bool, error) {
		if s.closed.Load() {
			return false, sluice.ErrClosed
		}
		var ok bool
		u.update(key, h, s.now(), func(st algo.State, now int64) (algo.State, bool) {
			st, ok = algo.CancelReservation(st, now, r)
			return st, ok
		})
		return ok, nil
	}), nil
}

// updater is implemented by the classes of the algorithms that can reserve or settle:
// gcraClass, pairClass and windowClass. update writes f's state when f says so.
type updater interface {
	update(key string, h uint64, now int64, f func(algo.State, int64) (algo.State, bool))
	params() algo.Params
}
