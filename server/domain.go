package server

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/store"
)

// domainItems matches the descriptors of one request, within the request limits, against
// cfg's envoyproxy/ratelimit domain of that name (nil when there is none, counted) and
// returns one item per match. mults[i] > 1 is descriptor i's unit_multiplier, hits[i] its
// cost. The error is about the request. With sc, the matches and the items are made in
// its slices.
func (s *Server) domainItems(cfg *config.Config, domain string, descs []config.Descriptor, mults []uint32,
	hits []int64, sc *scratch) (*envoyDomain, []item, error) {
	if err := checkSize(s.requestLimits(cfg), descs); err != nil {
		return nil, nil, err
	}
	ed := s.envoyCache(cfg).domains[domain]
	if ed == nil {
		s.metrics.unknownDomain.Inc()
		return nil, nil, nil
	}
	var matches []config.Match
	var items []item
	if sc != nil {
		matches, items = sc.matches[:0], sc.items[:0]
	}
	matches, err := ed.dom.AppendMatches(matches, descs)
	if err != nil {
		return nil, nil, err
	}
	// Zero: fresh, or a scratch's (putScratch leaves them zero).
	items = slices.Grow(items, len(matches))[:len(matches)]
	if sc != nil {
		sc.matches, sc.items = matches, items
	}
	var now time.Time // read once, for the first Blocked item
	for i := range matches {
		m := &matches[i]
		it := &items[i]
		it.status, it.rule, it.Shadow, it.N = m.Status, m.Rule, m.Shadow, hits[m.Descriptor]
		if m.Rule == nil {
			continue
		}
		it.name = ruleName(m.Rule)
		it.envoy = ed.rules[m.Rule] // nil for a limit override
		limit := m.Limit
		period := m.Rule.Unit.Period()
		if k := mults[m.Descriptor]; k > 1 {
			it.unitMultiplier = k
			if period > store.MaxPeriod/time.Duration(k) {
				return nil, nil, fmt.Errorf("descriptor %d: limit override of %d × %v is too long", m.Descriptor, k, m.Rule.Unit)
			}
			period *= time.Duration(k)
			if limit.Rate > 0 {
				limit.Period = period
			}
		}
		switch m.Status {
		case config.Limited:
			// Validated at load, unless scaled or made from a limit override.
			if it.envoy == nil || it.unitMultiplier > 1 {
				if err := limit.Validate(); err != nil {
					return nil, nil, fmt.Errorf("descriptor %d: %w", m.Descriptor, err)
				}
			}
			it.Key, it.Limit = m.Key, limit
		case config.Blocked:
			if now.IsZero() {
				now = s.now()
			}
			reset := windowReset(now, period)
			lim := sluice.Limit{Algorithm: sluice.FixedWindow, Period: period}
			var window time.Duration
			if c := m.Rule.Calendar; !c.IsZero() {
				// A calendar rule's window ends at the next period start.
				start, end := c.Bounds(now)
				reset, window = end.Sub(now), end.Sub(start)
				lim = sluice.Limit{Algorithm: sluice.FixedWindow, Calendar: c}
			}
			it.Decision = sluice.Decision{
				Limit:      lim,
				RetryAfter: reset,
				ResetAfter: reset,
				Window:     window,
			}
			it.Decided = true
		}
	}
	return ed, items, nil
}
