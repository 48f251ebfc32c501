package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

// refundScript gives back what the decision script spent in one slot (lua/refund.lua),
// with the six algorithms for the looks at the keys afterwards.
var refundScript = algoScript(allAlgos,
	"refund_bucket.lua", "refund_window.lua", "refund_log.lua", "refund.lua")

// refundTimeout bounds the refunds of a batch, which run even when the caller's context
// has ended: a refund not made leaves its units spent until the key's state empties.
const refundTimeout = 5 * time.Second

// slotCall is one slot's part of a batch: the indices of its requests, and what its
// decision script call returned.
type slotCall struct {
	idx   []int
	res   []algo.Outcome
	at    int64 // the call's now, µs: the instant of its spends
	err   error
	spent bool // the call was answered and allowed every request in it
}

// allowAcrossSlots decides reqs, validated, whose keys may be in several cluster slots, all
// or nothing: one decision script call per slot, concurrently; if any slot denied or
// failed, the slots that spent are refunded (docs/redis.md, "Decisions across cluster
// slots"). ats, when not nil, receives each request's instant: its slot call's now.
func (s *Store) allowAcrossSlots(ctx context.Context, reqs []sluice.Request, ats []int64) ([]sluice.Decision, error) {
	cn, err := s.connected()
	if err != nil {
		return nil, err
	}
	// Close waits for the batch, refunds included.
	if !s.startCall() {
		return nil, fmt.Errorf("redisstore: %w", sluice.ErrClosed)
	}
	defer s.inflight.Done()

	var calls []*slotCall
	bySlot := make(map[uint16]*slotCall)
	for i, r := range reqs {
		sl := idSlot(r.Key)
		c := bySlot[sl]
		if c == nil {
			c = &slotCall{}
			bySlot[sl] = c
			calls = append(calls, c)
		}
		c.idx = append(c.idx, i)
	}

	dctx, release := detached(ctx)
	inParallel(calls, func(c *slotCall) { c.res, c.at, c.err = s.decideSlot(dctx, cn, reqs, c.idx) })
	release()

	var failed error
	var spent []*slotCall
	for _, c := range calls {
		if c.err != nil {
			failed = cmp.Or(failed, c.err)
			continue
		}
		c.spent = !slices.ContainsFunc(c.res, func(r algo.Outcome) bool { return !r.Allowed })
		if c.spent {
			spent = append(spent, c)
		}
	}
	denied := len(spent) < len(calls)
	if denied && len(spent) > 0 {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
		rctx, release := detached(rctx)
		inParallel(spent, func(c *slotCall) {
			if err := s.refundSlot(rctx, cn, reqs, c); err != nil {
				// The units stay spent until the state empties: under-admission, never
				// more. The keys stay out of the log: they may be identities.
				s.logger.Warn("redisstore: a cross-slot batch was denied but one slot's spends could not be given back",
					"requests", len(c.idx), "error", err)
			}
		})
		release()
		cancel()
	}
	if failed != nil {
		if ctx.Err() != nil && errors.Is(failed, context.Canceled) {
			failed = fmt.Errorf("redisstore: %w", ctx.Err()) // the caller's context, through detached
		}
		return nil, failed
	}
	// When denied, a slot that denied reports as decide.lua does for a group; a slot that
	// spent reports the looks its refund made, or, if it failed, what it spent.
	out := make([]sluice.Decision, len(reqs))
	for _, c := range calls {
		for j, i := range c.idx {
			out[i] = c.res[j].Decision(reqs[i].Limit)
			if denied && c.spent {
				out[i].Allowed, out[i].RetryAfter = false, 0
			}
			if ats != nil {
				ats[i] = c.at
			}
		}
	}
	return out, nil
}

// inParallel runs f for every call, the first on this goroutine.
func inParallel(calls []*slotCall, f func(*slotCall)) {
	var wg sync.WaitGroup
	for _, c := range calls[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(c)
		}()
	}
	f(calls[0])
	wg.Wait()
}

// decideSlot runs the decision script on the requests idx of reqs, all in one slot, as one
// all-or-nothing group (an independent decision when there is one), and returns their
// results and the script's now.
func (s *Store) decideSlot(ctx context.Context, cn *conn, reqs []sluice.Request, idx []int) ([]algo.Outcome, int64, error) {
	b := new(callBufs)
	nowArg := b.start(s)
	items := make([]item, len(idx))
	for j, i := range idx {
		items[j] = newItem(reqs[i].Key, s.info(reqs[i].Limit), reqs[i].N)
		b.add(s, &items[j])
	}
	if len(idx) > 1 {
		b.grps = appendFloat(appendFloat(nil, 1), int64(len(idx)))
	}
	// Keys are distinct: Decide refuses a repeated (key, Limit).
	args := decideArgs(nil, nowArg, s.minTTL, b.reqs, b.grps, false, true, b.cal)
	vals, err := s.eval(ctx, cn.client, scriptFor([]*call{{items: items}}), b.keyStrings(), args).AsBytes()
	if err = b.read(vals, err, len(idx), true, "script"); err != nil {
		return nil, 0, wrap(ctx, "decide across slots", err)
	}
	res := make([]algo.Outcome, len(idx))
	for j := range res {
		res[j] = items[j].result(b.outcome(vals[32*j:], items[j].info))
	}
	return res, b.at, nil
}

// refundSlot gives back what c's call spent, and replaces c's results with looks at the
// keys afterwards (requests of cost 0 spent nothing and keep theirs).
func (s *Store) refundSlot(ctx context.Context, cn *conn, reqs []sluice.Request, c *slotCall) error {
	b := new(callBufs)
	nowArg := b.start(s)
	var which []int
	for j, i := range c.idx {
		if reqs[i].N > 0 {
			b.add(s, &item{id: reqs[i].Key, info: s.info(reqs[i].Limit), n: reqs[i].N, lease: c.res[j].Lease})
			b.reqs = appendFloat(b.reqs, c.at)
			which = append(which, j)
		}
	}
	if len(which) == 0 {
		return nil
	}
	// refund.lua reads the arguments decide.lua does but for ARGV[4..6], and appends its now
	// to the results when it has calendar bounds.
	withNow := len(b.cal) > 0
	args := decideArgs(nil, nowArg, s.minTTL, b.reqs, nil, false, withNow, b.cal)
	vals, err := s.eval(ctx, cn.client, refundScript, b.keyStrings(), args).AsBytes()
	if err = b.read(vals, err, len(which), withNow, "refund script"); err != nil {
		return wrap(ctx, "refund", err)
	}
	for k, j := range which {
		c.res[j] = b.outcome(vals[32*k:], s.info(reqs[c.idx[j]].Limit))
	}
	return nil
}

// detached returns a context for a script call that ends when ctx does but has no
// deadline of its own, for the reason callCtx has none. release frees it.
func detached(ctx context.Context) (_ context.Context, release func()) {
	c, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	return c, func() { stop(); cancel(nil) }
}
