package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/store"
)

// Reservations ([sluice.Limiter.Reserve])
//
// Reserve is one call of a second script, built from lua/prelude.lua and lua/reserve_*.lua
// (transcriptions of algo.ReserveGCRA, the bucket machine's reservation, and
// algo.CancelReservation), on the same key AllowN uses for the same
// identity and Limit, so reservations and decisions share one state. "Now" is Redis's TIME
// unless WithClock says otherwise, so every client of one Redis books slots on one clock:
// workers on many machines pace to one quota whatever their own clocks say. A reservation's
// instant is returned as a delay from the script's now; the local At is the time the reply
// arrived plus that delay, which is never early by Redis's clock.
//
// Reservations are not coalesced with decisions: each is its own script call, pipelined by
// the client with whatever else is in flight. Pacing is for modest rates (outbound quotas),
// where a round trip per request is cheap beside the wait.
//
// Cancel sends the reservation's before and after states back to the script, which restores
// the before state only if the key still holds the after state and the reserved instant
// has not come on Redis's clock (algo.CancelReservation). A cancel whose fate is unknown (a
// timeout) may be retried: the check makes it idempotent.

var reserveScript = newScript("prelude.lua", "reserve_gcra.lua", "reserve_cancel.lua", "reserve_entry.lua")

// Reserve implements [sluice.Limiter.Reserve] for GCRA, TokenBucket and LeakyBucket
// limits (see package sluice for the semantics, and the comment above for how it runs on
// Redis). The deadline of ctx bounds the wait, measured from the moment Reserve is called.
func (s *Store) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	maxWait := int64(-1)
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = max(time.Until(deadline).Microseconds(), 0)
	}
	res, _, err := s.reserve(ctx, key, limit, n, maxWait)
	return res, err
}

// reserve is Reserve with an explicit bound on the wait (µs, -1 for none); it also returns
// the script's reservation, in the store's clock.
func (s *Store) reserve(ctx context.Context, key string, limit sluice.Limit, n, maxWait int64) (sluice.Reservation, algo.Reservation, error) {
	if err := store.CheckRequest(key, limit, n); err != nil {
		return sluice.Reservation{}, algo.Reservation{}, err
	}
	if !algo.CanReserve(limit.Algorithm) {
		return sluice.Reservation{}, algo.Reservation{}, fmt.Errorf("%w: %v cannot reserve; pacing needs gcra, token_bucket or leaky_bucket", sluice.ErrInvalidLimit, limit.Algorithm)
	}
	if s.closed.Load() {
		return sluice.Reservation{}, algo.Reservation{}, fmt.Errorf("redisstore: %w", sluice.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return sluice.Reservation{}, algo.Reservation{}, fmt.Errorf("redisstore: %w", err)
	}
	if n == 0 {
		return sluice.Reservation{OK: true, Limit: limit, At: time.Now()}, algo.Reservation{OK: true}, nil
	}
	li := s.info(limit)
	k := s.redisKey(key, li)
	args := make([]string, 0, 9)
	args = append(args, s.scriptNow(), s.minTTL, "r")
	args = append(args, li.args[:]...)
	args = append(args, strconv.FormatInt(n, 10), strconv.FormatInt(maxWait, 10))
	cn, err := s.connected()
	if err != nil {
		return sluice.Reservation{}, algo.Reservation{}, err
	}
	vals, err := s.eval(ctx, cn.client, reserveScript, []string{k}, args).AsIntSlice()
	recv := time.Now()
	if err == nil && len(vals) != 7 {
		err = errorf("reserve script returned %d values, want 7", len(vals))
	}
	if err != nil {
		return sluice.Reservation{}, algo.Reservation{}, wrap(ctx, "reserve", err)
	}
	r := algo.Reservation{
		OK:     vals[0] == 1,
		Delay:  vals[1],
		At:     vals[2],
		Before: algo.State{A: vals[3], B: vals[4]},
		After:  algo.State{A: vals[5], B: vals[6]},
	}
	delay := time.Duration(r.Delay) * time.Microsecond
	res := sluice.Reservation{OK: r.OK, Limit: limit, N: n, Delay: delay, At: recv.Add(delay)}
	if !r.OK {
		return res, r, nil
	}
	return store.WithCancel(res, func(ctx context.Context) (bool, error) {
		return s.cancel(ctx, k, li, r)
	}), r, nil
}

// cancel runs the cancel half of the reservation script.
func (s *Store) cancel(ctx context.Context, k string, li *limitInfo, r algo.Reservation) (bool, error) {
	if s.closed.Load() {
		return false, fmt.Errorf("redisstore: %w", sluice.ErrClosed)
	}
	args := make([]string, 0, 12)
	args = append(args, s.scriptNow(), s.minTTL, "c")
	args = append(args, li.args[:]...)
	for _, v := range []int64{r.At, r.Before.A, r.Before.B, r.After.A, r.After.B} {
		args = append(args, strconv.FormatInt(v, 10))
	}
	cn, err := s.connected()
	if err != nil {
		return false, err
	}
	ok, err := s.eval(ctx, cn.client, reserveScript, []string{k}, args).AsInt64()
	if err != nil {
		return false, wrap(ctx, "cancel reservation", err)
	}
	return ok == 1, nil
}
