package overload

import "math/bits"

// gradient is the limit and how it learns: the state and the update the package doc's
// "The limit" section states.
type gradient struct {
	limit    int64 // milli-permits, in [min·1000, max·1000]
	long     int64 // ns; 0 before the first window
	n        int64 // windows averaged into long, at most warmup+1
	pinned   bool  // held at MinLimit while re-measuring
	saved    int64 // the limit to return to after re-measuring
	nextMeas int64 // ns on the clock, when the next re-measurement is due; 0: not scheduled
}

// warmup is how many windows the long-term latency is the plain mean of, before it
// becomes an EWMA over LongWindow windows.
const warmup = 10

// maxSample caps a latency sample (about 18 minutes), so that the products below stay far
// from overflow.
const maxSample = 1 << 40

// smoothing is the share of each window's step taken, as a divisor.
const smoothing = 5

// permits is the limit admitted, in requests.
func (g *gradient) permits(s *settings) int64 {
	if g.pinned {
		return s.min
	}
	return g.limit / 1000
}

// update closes a window ending at now (ns on the clock) with mean latency short (ns) and
// peak requests in flight.
func (g *gradient) update(s *settings, now, short, peak int64) {
	short = max(short, 1)
	if g.pinned {
		g.long, g.n, g.pinned = short, warmup+1, false
		g.limit = g.saved
		g.nextMeas = now + s.remeasure
		return
	}
	g.n = min(g.n+1, warmup+1)
	d := g.n
	if g.n > warmup {
		d = s.longWindow
	}
	g.long += (short - g.long) / min(d, s.longWindow)
	if g.long > 2*short {
		g.long -= g.long / 20
	}
	grad := min(max((100+s.tolerance)*g.long*10/short, 500), 1000)
	head := s.headroom * 1000
	if head == 0 {
		head = isqrt(g.limit * 1000)
	}
	next := g.limit*grad/1000 + head
	next = g.limit + (next-g.limit)/smoothing
	if 2*peak < g.limit/1000 {
		next = min(next, g.limit)
	}
	g.limit = min(max(next, s.min*1000), s.max*1000)
	if s.remeasure > 0 {
		switch {
		case g.nextMeas == 0:
			g.nextMeas = now + s.remeasure
		case now >= g.nextMeas:
			g.pinned, g.saved = true, g.limit
		}
	}
}

// isqrt is ⌊√x⌋ for x ≥ 0.
func isqrt(x int64) int64 {
	if x < 2 {
		return x
	}
	r := int64(1) << ((bits.Len64(uint64(x)) + 1) / 2) // ≥ √x
	for {
		y := (r + x/r) / 2
		if y >= r {
			return r
		}
		r = y
	}
}
