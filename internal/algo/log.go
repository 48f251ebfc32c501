package algo

// Log is the state of SlidingLog: the timestamps (µs) of the admitted units still inside the
// window, oldest first, one per unit, in a ring buffer that grows up to Rate entries. The zero
// Log is empty and ready to use.
type Log struct {
	ts   []int64 // ring storage; len(ts) is the capacity in use
	head int     // index of the oldest timestamp
	n    int     // number of timestamps held
}

// Len is the number of timestamps held (including any that expire at the next decision).
func (l *Log) Len() int { return l.n }

// at returns the i-th oldest timestamp, 0-based.
func (l *Log) at(i int) int64 { return l.ts[(l.head+i)%len(l.ts)] }

// Newest returns the latest timestamp held, or 0 for an empty log.
func (l *Log) Newest() int64 {
	if l.n == 0 {
		return 0
	}
	return l.at(l.n - 1)
}

// Timestamps returns a copy of the timestamps held, oldest first.
func (l *Log) Timestamps() []int64 {
	out := make([]int64, l.n)
	for i := range out {
		out[i] = l.at(i)
	}
	return out
}

// expire drops the timestamps at or before now-period.
func (l *Log) expire(now, period int64) {
	for l.n > 0 && l.ts[l.head] <= now-period {
		l.head = (l.head + 1) % len(l.ts)
		l.n--
	}
	if l.n == 0 {
		l.head = 0
	}
}

// push appends c copies of t, growing the ring as needed (never beyond limit entries: the
// caller only pushes what fits under Rate).
func (l *Log) push(t int64, c int, limit int) {
	if l.n+c > len(l.ts) {
		size := min(max(len(l.ts)*2, l.n+c, 4), limit)
		grown := make([]int64, size)
		for i := 0; i < l.n; i++ {
			grown[i] = l.at(i)
		}
		l.ts, l.head = grown, 0
	}
	for i := 0; i < c; i++ {
		l.ts[(l.head+l.n)%len(l.ts)] = t
		l.n++
	}
}

// Shrink releases ring capacity far above what is held, so that a key whose traffic fell
// does not keep a Rate-sized buffer.
func (l *Log) Shrink() {
	if l.n == 0 {
		*l = Log{}
		return
	}
	if len(l.ts) > 64 && l.n < len(l.ts)/4 {
		l.ts, l.head = l.Timestamps(), 0
	}
}

// SlidingLog is the exact sliding window: a cost n is allowed at now when the units admitted
// in (now-Period, now] plus n are at most Rate. It keeps one timestamp per admitted unit
// (at most Rate of them), so its memory is proportional to Rate. Burst is not used: the
// window's capacity, and the largest cost, is Rate.
//
// Remaining = Rate - held. ResetAfter = until the newest timestamp leaves the window.
// RetryAfter is exact: with held units h and cost n, the (h+n-Rate)-th oldest timestamp t
// must leave the window, which happens at t+Period.
//
// Error bound: none; it is the reference the other algorithms are measured against.
//
// If commit is false an allowed cost is not recorded (used to decide several limits all or
// nothing); expired timestamps are dropped either way, which changes no decision. Time going
// backwards: a unit is stamped with the newest timestamp held if that is later than now, so
// it leaves the window no earlier than its predecessors.
func SlidingLog(l *Log, now int64, p Params, n int64, commit bool) Result {
	c := cost(n)
	l.expire(now, p.Period)
	held := int64(l.n)
	reset := func() int64 {
		if l.n == 0 {
			return 0
		}
		return nonNeg(l.Newest() + p.Period - now)
	}
	if held+c > p.Rate {
		oldest := l.at(int(held + c - p.Rate - 1))
		return Result{
			Remaining:  nonNeg(p.Rate - held),
			ResetAfter: reset(),
			RetryAfter: oldest + p.Period - now,
		}
	}
	if n > 0 && commit {
		l.push(max(now, l.Newest()), int(c), int(p.Rate))
		held += c
	}
	return Result{Allowed: true, Remaining: p.Rate - held, ResetAfter: reset()}
}
