package region

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/share"
	"github.com/sluicehq/sluice/store"
)

// Share is the per-region mode: a sluice.Limiter that decides every request against an
// inner limiter (the region's own store) under a fixed fraction of the limit it is asked
// for, scaled by share.Limit: Rate and Burst rounded down, at least 1 each. Regions with
// fractions summing to at most 1 hold the global limit together (with very small limits,
// up to one unit per region and Period over it). Every call is passed through under the
// scaled limit, which decisions report.
type Share struct {
	inner sluice.Limiter
	ppm   int64
}

// NewShare returns a Share applying fraction (0 < fraction ≤ 1, kept in parts per
// million) of every limit to inner.
func NewShare(inner sluice.Limiter, fraction float64) (*Share, error) {
	if !(fraction > 0 && fraction <= 1) {
		return nil, fmt.Errorf("region: share %v must be in (0, 1]", fraction)
	}
	ppm := share.FromFraction(fraction)
	if ppm < 1 {
		return nil, fmt.Errorf("region: share %v is below one part per million", fraction)
	}
	return &Share{inner: inner, ppm: ppm}, nil
}

// Limit returns the limit Share applies for l.
func (s *Share) Limit(l sluice.Limit) sluice.Limit { return share.Limit(l, s.ppm) }

// Decide implements sluice.Limiter under the scaled limits.
func (s *Share) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	var buf [4]sluice.Request
	scaled := append(buf[:0], reqs...)
	for i := range scaled {
		if err := scaled[i].Limit.Validate(); err != nil {
			if len(reqs) == 1 {
				return sluice.Report{Kind: store.KindBadInput}, err
			}
			return sluice.Report{Kind: store.KindBadInput}, fmt.Errorf("request %d: %w", i, err)
		}
		scaled[i].Limit = s.Limit(scaled[i].Limit)
	}
	return s.inner.Decide(ctx, scaled, ds)
}

// AllowN is Decide of one request.
func (s *Share) AllowN(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Decision, error) {
	return sluice.AllowN(ctx, s, key, limit, n)
}

// Reset implements sluice.Limiter: it resets key's state under the scaled limit.
func (s *Share) Reset(ctx context.Context, key string, limit sluice.Limit) error {
	if err := limit.Validate(); err != nil {
		return err
	}
	return s.inner.Reset(ctx, key, s.Limit(limit))
}

// Release implements sluice.Limiter under the scaled limit, where the lease was taken.
func (s *Share) Release(ctx context.Context, key string, limit sluice.Limit, lease sluice.LeaseID) (bool, error) {
	if err := limit.Validate(); err != nil {
		return false, err
	}
	return s.inner.Release(ctx, key, s.Limit(limit), lease)
}

// Settle implements sluice.Limiter under the scaled limit, where the reservation was made.
func (s *Share) Settle(ctx context.Context, key string, limit sluice.Limit, reservation sluice.ReservationID, cost int64) (sluice.Decision, error) {
	if err := limit.Validate(); err != nil {
		return sluice.Decision{}, err
	}
	return s.inner.Settle(ctx, key, s.Limit(limit), reservation, cost)
}

// Reserve implements sluice.Limiter under the scaled limit.
func (s *Share) Reserve(ctx context.Context, key string, limit sluice.Limit, n int64) (sluice.Reservation, error) {
	if err := limit.Validate(); err != nil {
		return sluice.Reservation{}, err
	}
	return s.inner.Reserve(ctx, key, s.Limit(limit), n)
}

var _ sluice.Limiter = (*Share)(nil)
