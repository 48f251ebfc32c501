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

// reserveScript reserves (algo.ReserveGCRA) and cancels (algo.CancelReservation) on the
// key AllowN uses, one call each, not coalesced.
var reserveScript = newScript("prelude.lua", "reserve_gcra.lua", "reserve_cancel.lua", "reserve_entry.lua")

// Reserve implements [sluice.Limiter.Reserve] for GCRA, TokenBucket and LeakyBucket
// limits, on Redis's clock unless WithClock: At is the reply's arrival plus the script's
// delay, never early by Redis's clock. The deadline of ctx bounds the wait.
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
	args := append([]string{s.scriptNow(), s.minTTL, "r"}, li.args[:]...)
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

// cancel runs the cancel half of the reservation script: it restores r.Before only if the
// key holds r.After and r.At has not come, so a retry is idempotent.
func (s *Store) cancel(ctx context.Context, k string, li *limitInfo, r algo.Reservation) (bool, error) {
	if s.closed.Load() {
		return false, fmt.Errorf("redisstore: %w", sluice.ErrClosed)
	}
	args := append([]string{s.scriptNow(), s.minTTL, "c"}, li.args[:]...)
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
