package algo

import (
	"cmp"
	"slices"
)

// Leases is the state of a Concurrency limit: the leases held, each an id and the instant
// (µs) it expires, in order of expiry (ties by id), as a Redis sorted set scored by expiry
// orders them. The zero Leases is a fresh key.
type Leases struct {
	held []lease
}

type lease struct {
	exp int64
	id  uint64
}

// Len is the number of leases held, expired ones included until the next decision.
func (l *Leases) Len() int { return len(l.held) }

// ExpiresAt is the instant from which l holds no lease (0 when it holds none).
func (l *Leases) ExpiresAt() int64 {
	if len(l.held) == 0 {
		return 0
	}
	return l.held[len(l.held)-1].exp
}

// expire drops the leases that expire at or before now.
func (l *Leases) expire(now int64) {
	i := 0
	for i < len(l.held) && l.held[i].exp <= now {
		i++
	}
	if i > 0 {
		l.held = slices.Delete(l.held, 0, i)
	}
}

// Concurrency decides a Concurrency limit: at most p.Rate leases held at once, each
// expiring p.Period µs (the Limit's Lease) after the decision that took it.
//
// State: the leases held (Leases). A decision first drops the leases that have expired
// (expiry ≤ now). Cost 1 takes a lease with id id, expiring at now + Period, if fewer
// than Rate are held, and only when commit is set (the decision's Outcome.Lease is then
// id); cost 0 only looks. Callers validate n ≤ 1 beforehand (store.CheckRequest).
//
// Results: Remaining is Rate less the leases held after the call; ResetAfter the time
// until the last lease held expires; RetryAfter, for a denial, the time until the oldest
// expires, which is when a slot frees if no holder releases first (an upper bound). No
// rounding: every quantity is whole microseconds.
//
// Time going backwards: a lease taken at a later instant than now stays held until its
// own expiry, so a step back never frees a slot early; it can only keep one longer.
func Concurrency(l *Leases, now int64, p Params, n int64, id uint64, commit bool) Result {
	l.expire(now)
	held := int64(len(l.held))
	if held+max(n, 1) > p.Rate { // a look asks whether one lease would be allowed
		return Result{
			Remaining:  nonNeg(p.Rate - held),
			ResetAfter: nonNeg(l.ExpiresAt() - now),
			RetryAfter: nonNeg(l.held[0].exp - now),
		}
	}
	if n > 0 && commit {
		e := lease{exp: now + p.Period, id: id}
		i, _ := slices.BinarySearchFunc(l.held, e, compareLease)
		l.held = slices.Insert(l.held, i, e)
		held++
	}
	return Result{Allowed: true, Remaining: p.Rate - held, ResetAfter: nonNeg(l.ExpiresAt() - now)}
}

func compareLease(a, b lease) int { return cmp.Or(cmp.Compare(a.exp, b.exp), cmp.Compare(a.id, b.id)) }

// Release gives back lease id, after dropping the expired leases as Concurrency does, and
// reports whether it was held: false for an expired, released or unknown id, which
// changes nothing else.
func Release(l *Leases, now int64, id uint64) bool {
	l.expire(now)
	for i, e := range l.held {
		if e.id == id {
			l.held = slices.Delete(l.held, i, i+1)
			return true
		}
	}
	return false
}
