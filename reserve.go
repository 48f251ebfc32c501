package sluice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/reservation"
)

// Reservation is a store's promise that N units of a key's quota under Limit are spent for
// use at At. The zero Reservation is not OK and cancels nothing. A store makes one
// cancellable with store.WithCancel.
//
// Copies of a Reservation share its cancellation: Cancel gives the units back at most once
// however many copies call it.
type Reservation struct {
	// OK reports whether the units were reserved. When false nothing was spent: the
	// reservation's instant would have been after the deadline of the context given to
	// Reserve, and Delay and At say when it would have been.
	OK bool
	// Limit and N are the limit and cost reserved.
	Limit Limit
	N     int64
	// Delay is the wait from the store's decision to the reserved instant, on the store's
	// clock (Redis's TIME for the Redis store). 0 means at once.
	Delay time.Duration
	// At is the reserved instant on the local clock: the time the store's answer arrived
	// plus Delay. Acting at At is never early by the store's clock, since the decision was
	// made before its answer arrived.
	At time.Time

	cancel *canceler
}

// canceler gives a reservation back at most once.
type canceler struct {
	mu   sync.Mutex
	done bool
	f    func(context.Context) (bool, error)
}

func init() {
	reservation.WithCancel = func(r any, f func(context.Context) (bool, error)) any {
		res := r.(Reservation)
		res.cancel = &canceler{f: f}
		return res
	}
}

// Cancel tells the store that the reserved units will not be used and gives them back
// where the algorithm allows, reporting whether it did. The rule is exact: the units come
// back, and the key's state becomes exactly what it would be had the reservation never been
// made, if and only if
//
//   - the reserved instant has not come (on the store's clock): a reservation with Delay 0
//     is used at once and never comes back, and
//   - nothing was spent on the key under the same Limit since the reservation: a later
//     reservation or decision has taken the slots after it, and one state (GCRA's
//     TAT, a bucket's credit or level) cannot hold a hole in front of them.
//
// Otherwise nothing changes and Cancel returns false. Cancelling a reservation that is
// not OK, or cancelling twice, returns false without asking the store.
func (r Reservation) Cancel(ctx context.Context) (bool, error) {
	c := r.cancel
	if !r.OK || c == nil {
		return false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false, nil
	}
	ok, err := c.f(ctx)
	if err != nil {
		return false, err
	}
	c.done = true
	return ok, nil
}

// ErrWaitExceedsDeadline: Wait refused to wait, since the reserved instant would fall
// after the deadline of its context. Nothing is spent.
var ErrWaitExceedsDeadline = errors.New("sluice: wait would exceed the context deadline")

// cancelBudget bounds the store round trip Wait spends giving a reservation back after its
// context ended.
const cancelBudget = 250 * time.Millisecond

// Wait reserves n units of key's quota under limit with r and sleeps until the reserved
// instant. It returns nil when the caller may proceed.
//
//   - If ctx is already done, it returns ctx.Err() without reserving.
//   - If the reserved instant would fall after the deadline of ctx, it returns an error
//     wrapping ErrWaitExceedsDeadline at once, having spent nothing.
//   - If ctx ends while it sleeps, it cancels the reservation (see Reservation.Cancel)
//     within at most 250ms and before the reserved instant, and returns ctx.Err().
//   - Errors from Reserve (bad input, a store failure) are returned as they are.
//
// n == 0 returns nil at once (after checking ctx).
func Wait(ctx context.Context, r Limiter, key string, limit Limit, n int64) error {
	return wait(ctx, r, key, limit, n, newTimer)
}

// newTimer is Wait's timer source: a channel that receives at instant at, and its stop.
func newTimer(at time.Time) (<-chan time.Time, func() bool) {
	t := time.NewTimer(time.Until(at))
	return t.C, t.Stop
}

// wait is Wait with its timer source, which tests replace.
func wait(ctx context.Context, r Limiter, key string, limit Limit, n int64, newTimer func(at time.Time) (<-chan time.Time, func() bool)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	res, err := r.Reserve(ctx, key, limit, n)
	if err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); res.OK && ok && res.At.After(deadline) {
		giveBack(ctx, res) // the answer came so late that the instant slipped past the deadline
		res.OK = false
	}
	if !res.OK {
		return fmt.Errorf("%w: %d units of %v would wait %v", ErrWaitExceedsDeadline, n, limit, res.Delay)
	}
	if d := time.Until(res.At); d <= 0 {
		return nil
	}
	c, stop := newTimer(res.At)
	defer stop()
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		giveBack(ctx, res)
		return ctx.Err()
	}
}

// giveBack cancels res on behalf of a caller whose context has ended or will end before
// res.At, within cancelBudget and before res.At.
func giveBack(ctx context.Context, res Reservation) {
	deadline := time.Now().Add(cancelBudget)
	if res.At.Before(deadline) {
		deadline = res.At
	}
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	_, _ = res.Cancel(cctx) // best effort: the caller's answer is its context's error
}
