package store

import (
	"cmp"
	"fmt"
	"time"

	"github.com/sluicehq/sluice"
)

// CheckRequests validates reqs the way every store does before deciding them
// ([sluice.Limiter.Decide]), and that ds can hold their decisions. Errors name the
// request's index.
func CheckRequests(reqs []sluice.Request, ds []sluice.Decision) error {
	if len(ds) < len(reqs) {
		return fmt.Errorf("%w: %d decisions for %d requests", sluice.ErrInvalidCost, len(ds), len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		err := cmp.Or(CheckRequest(r.Key, r.Limit, r.N), CheckSettleTTL(r.Limit, r.SettleTTL))
		if err != nil {
			if len(reqs) == 1 {
				return err
			}
			return fmt.Errorf("request %d: %w", i, err)
		}
	}
	return nil
}

// CheckDistinct reports a request of reqs that repeats the key and limit of an earlier
// one, as an error wrapping [sluice.ErrInvalidKey]: one request decides them together.
func CheckDistinct(reqs []sluice.Request) error {
	if len(reqs) < 2 {
		return nil
	}
	type ident struct {
		key   string
		limit sluice.Limit
	}
	seen := make(map[ident]int, len(reqs))
	for i, r := range reqs {
		if j, dup := seen[ident{r.Key, r.Limit}]; dup {
			return fmt.Errorf("%w: request %d repeats the key and limit of request %d", sluice.ErrInvalidKey, i, j)
		}
		seen[ident{r.Key, r.Limit}] = i
	}
	return nil
}

// CheckSettleTTL reports whether a request under limit may carry SettleTTL ttl: 0, or in
// (0, MaxSettleTTL] for a limit whose algorithm can settle (see [sluice.Limiter.Settle]).
func CheckSettleTTL(limit sluice.Limit, ttl time.Duration) error {
	switch {
	case ttl == 0:
		return nil
	case ttl < 0 || ttl > MaxSettleTTL:
		return fmt.Errorf("%w: settle TTL must be in (0, %v], got %v", sluice.ErrInvalidLimit, MaxSettleTTL, ttl)
	case limit.Algorithm == sluice.SlidingLog || limit.Algorithm == sluice.Concurrency:
		return fmt.Errorf("%w: %v cannot settle a cost after the fact; use gcra, token_bucket, leaky_bucket, fixed_window or sliding_window", sluice.ErrInvalidLimit, limit.Algorithm)
	case !limit.Calendar.IsZero():
		return fmt.Errorf("%w: a calendar quota cannot settle a cost after the fact (its period's count is billed as admitted)", sluice.ErrInvalidLimit)
	}
	return nil
}

// CheckSettle validates a settlement ([sluice.Limiter.Settle]) the way every store does. A
// reservation id that no store gives is an error wrapping [sluice.ErrUnknownReservation].
func CheckSettle(key string, limit sluice.Limit, reservation sluice.ReservationID, cost int64) error {
	if err := cmp.Or(CheckKey(key), limit.Validate(), CheckSettleTTL(limit, time.Second)); err != nil {
		return err
	}
	if cost < 0 {
		return fmt.Errorf("%w: a settled cost must not be negative, got %d", sluice.ErrInvalidCost, cost)
	}
	if !validID(uint64(reservation)) {
		return fmt.Errorf("%w: %d is not a reservation id", sluice.ErrUnknownReservation, uint64(reservation))
	}
	return nil
}

// CheckRequest validates a key, limit and cost the way every store does before deciding.
// For a valid limit the cost is valid exactly when 0 ≤ n ≤ limit.MaxCost().
func CheckRequest(key string, limit sluice.Limit, n int64) error {
	if err := cmp.Or(CheckKey(key), limit.Validate()); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("%w: cost must not be negative, got %d", sluice.ErrInvalidCost, n)
	}
	if n > 1 && limit.Algorithm == sluice.Concurrency {
		return fmt.Errorf("%w: a request takes one lease of %v; cost must be 0 or 1, got %d", sluice.ErrInvalidCost, limit, n)
	}
	if n > limit.MaxCost() {
		return fmt.Errorf("%w: cost %d exceeds the %d that %v can ever allow", sluice.ErrCostExceedsLimit, n, limit.MaxCost(), limit)
	}
	return nil
}

// CheckKey reports whether key is acceptable to a store ([ValidKey]). The error wraps
// [sluice.ErrInvalidKey].
func CheckKey(key string) error {
	if ValidKey(key) {
		return nil
	}
	return keyError(key)
}

// ValidKey reports whether key is acceptable to a store: not empty, at most [MaxKeyLen]
// bytes. Any bytes are allowed. It is [CheckKey] without the error.
func ValidKey(key string) bool { return key != "" && len(key) <= MaxKeyLen }

func keyError(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", sluice.ErrInvalidKey)
	}
	return fmt.Errorf("%w: key of %d bytes exceeds %d", sluice.ErrInvalidKey, len(key), MaxKeyLen)
}

// CheckRelease validates a release ([sluice.Limiter.Release]) the way every store does: a
// valid key, a Concurrency limit, and a lease id of the kind stores give (in [1,
// MaxLeaseID]).
func CheckRelease(key string, limit sluice.Limit, lease sluice.LeaseID) error {
	if err := cmp.Or(CheckKey(key), limit.Validate()); err != nil {
		return err
	}
	if limit.Algorithm != sluice.Concurrency {
		return fmt.Errorf("%w: only a concurrency limit holds leases; %v does not", sluice.ErrInvalidLimit, limit)
	}
	if !validID(uint64(lease)) {
		return fmt.Errorf("%w: %d is not a lease id", sluice.ErrInvalidLease, uint64(lease))
	}
	return nil
}

// validID reports whether v is an id a store gives.
func validID(v uint64) bool { return v != 0 && v <= MaxLeaseID }
