package server

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
	"github.com/sluicehq/sluice/store"
)

// rls implements envoy.service.ratelimit.v3.RateLimitService.
type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit answers one request of Envoy's rate limit filter. docs/envoy.md says
// how each field is filled.
func (r *rls) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return r.s.ShouldRateLimit(ctx, req)
}

// ShouldRateLimit decides an Envoy rate limit request against the configuration in force.
// It is what the gRPC service calls; it is exported so that other transports can use it.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := monotonic()
	resp, err := s.shouldRateLimit(ctx, req)
	c := codeOK
	switch {
	case status.Code(err) == codes.InvalidArgument:
		c = codeInvalid
	case err != nil:
		c = codeError
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		c = codeOverLimit
	}
	s.metrics.grpc.observe(c, start)
	return resp, err
}

func (s *Server) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	cfg := s.config()
	sc := getScratch(req.Descriptors)
	defer putScratch(sc)
	descs, mults, hits := sc.descs, sc.mults, sc.hits
	for i, d := range req.Descriptors {
		from := len(sc.entries)
		for _, e := range d.Entries {
			sc.entries = append(sc.entries, config.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		descs[i].Entries = sc.entries[from:len(sc.entries):len(sc.entries)]
		if o := d.GetLimit(); o != nil {
			u, err := config.ParseUnit(o.GetUnit().String())
			if err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "descriptor %d: limit override: %v", i, err)
			}
			descs[i].Override = &config.LimitOverride{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: u}
			if m := o.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
				mults[i] = m.GetValue()
			}
		}
		hits[i] = cmp.Or(int64(req.GetHitsAddend()), 1)
		if h := d.GetHitsAddend(); h != nil {
			hits[i] = int64(min(h.GetValue(), math.MaxInt64))
		}
		if d.GetIsNegativeHits() {
			hits[i] = 0 // nothing to refund (a denial spends nothing): only look
		}
	}
	ed, items, err := s.domainItems(cfg, req.Domain, descs, mults, hits, sc)
	switch {
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	case ed == nil: // as the reference implementation: an unknown domain limits nothing
		return &newAnswer(len(req.Descriptors)).resp, nil
	}
	dom := ed.dom

	out, err := s.decide(s.tracer.ExtractGRPC(ctx), opRLS, cfg, scope{name: dom.Name}, items)
	if err != nil {
		if errors.Is(err, sluice.ErrStoreUnavailable) {
			// Fail closed: Envoy must deny, and only OVER_LIMIT makes it deny (an error
			// would be failed open by Envoy's default failure_mode_deny: false).
			return s.closedResponse(items), nil
		}
		if store.IsBadInput(err) { // a limit the configuration let through
			s.log.LogAttrs(ctx, slog.LevelDebug, "rate limit request refused", slog.String("domain", dom.Name), slog.String("error", err.Error()))
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		s.metrics.storeErrors.Inc()
		s.log.LogAttrs(ctx, slog.LevelError, "rate limit not decided", slog.String("domain", dom.Name), slog.String("error", err.Error()))
		return nil, status.Error(codes.Unavailable, "rate limit store unavailable")
	}

	a := newAnswer(len(items))
	if !out.Allowed && !s.opts.ShadowMode {
		a.resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	now := s.now()
	for i := range items {
		descriptorStatus(&items[i], &a.statuses[i], now)
		ed.count(&items[i])
	}
	s.addHeaders(a, items, out.RetryAfter)
	if !out.Allowed {
		s.logDenied(ctx, dom.Name, items)
	}
	return &a.resp, nil
}

// scratch holds the slices one ShouldRateLimit call works with, reused through
// scratchPool; nothing in it outlives the call.
type scratch struct {
	descs   []config.Descriptor
	entries []config.Entry
	mults   []uint32
	hits    []int64
	matches []config.Match
	items   []item
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxPooledScratch bounds the slices of a scratch kept for reuse.
const maxPooledScratch = 64

// getScratch returns a scratch with descs, mults and hits of len(descs) elements, descs
// and mults zero, and no entries.
func getScratch(descs []*ratelimitv3.RateLimitDescriptor) *scratch {
	sc := scratchPool.Get().(*scratch)
	n, entries := len(descs), 0
	for _, d := range descs {
		entries += len(d.GetEntries())
	}
	sc.descs = slices.Grow(sc.descs[:0], n)[:n]
	sc.mults = slices.Grow(sc.mults[:0], n)[:n]
	sc.hits = slices.Grow(sc.hits[:0], n)[:n]
	sc.entries = slices.Grow(sc.entries[:0], entries)
	return sc
}

func putScratch(sc *scratch) {
	if cap(sc.descs) > maxPooledScratch || cap(sc.entries) > maxPooledScratch ||
		cap(sc.matches) > maxPooledScratch || cap(sc.items) > maxPooledScratch {
		return
	}
	// Drop the references, and leave every slice zero up to its capacity (AppendMatches
	// may write past the length it returns with an error).
	clear(sc.descs)
	clear(sc.mults)
	clear(sc.entries)
	clear(sc.matches[:cap(sc.matches)])
	clear(sc.items)
	scratchPool.Put(sc)
}

// statusBlock is a descriptor status with the messages it may point to.
type statusBlock struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// answer is a ShouldRateLimit answer and the memory its messages point into, so that the
// common answer (one descriptor, up to three headers) is one allocation. Nothing in it
// is written after the handler returns it.
type answer struct {
	resp     rlsv3.RateLimitResponse
	statuses []statusBlock
	ptr      [1]*rlsv3.RateLimitResponse_DescriptorStatus
	block    [1]statusBlock
	hptrs    [3]*corev3.HeaderValue
	hvals    [3]corev3.HeaderValue
	// text holds the headers' values when they fit.
	text [56]byte
}

// newAnswer returns an OK answer with n OK descriptor statuses to fill.
func newAnswer(n int) *answer {
	a := &answer{}
	a.resp.OverallCode = rlsv3.RateLimitResponse_OK
	if n == 1 {
		a.resp.Statuses, a.statuses = a.ptr[:], a.block[:]
	} else {
		a.statuses = make([]statusBlock, n)
		a.resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	for i := range a.statuses {
		a.resp.Statuses[i] = &a.statuses[i].status
		a.statuses[i].status.Code = rlsv3.RateLimitResponse_OK
	}
	return a
}

// addHeader appends a response header to the answer's response_headers_to_add.
func (a *answer) addHeader(key, value string) {
	h := a.resp.ResponseHeadersToAdd
	if h == nil {
		h = a.hptrs[:0]
	}
	var v *corev3.HeaderValue
	if len(h) < len(a.hvals) {
		v = &a.hvals[len(h)]
	} else {
		v = new(corev3.HeaderValue)
	}
	v.Key, v.Value = key, value
	a.resp.ResponseHeadersToAdd = append(h, v)
}

// descriptorStatus fills one descriptor's answer as the reference implementation fills
// it (docs/envoy.md, "The answers"). m.reset holds resetAfter for every descriptor with a
// current_limit, for the reference's headers.
func descriptorStatus(it *item, m *statusBlock, now time.Time) {
	st := &m.status
	switch it.status {
	case config.NoMatch, config.Replaced:
		return
	case config.Unlimited:
		st.LimitRemaining = math.MaxUint32
		return
	}
	r := it.rule
	st.CurrentLimit = &m.limit
	st.CurrentLimit.Name = r.Name
	st.CurrentLimit.RequestsPerUnit = r.RequestsPerUnit
	st.CurrentLimit.Unit = unitProto(r.Unit)
	if it.unitMultiplier > 1 {
		st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(it.unitMultiplier)
	}
	over := it.Over()
	if over && !it.Shadow {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	m.reset.Seconds = resetAfter(it, now)
	if it.Decided {
		st.LimitRemaining = uint32(min(it.Decision.Remaining, math.MaxUint32))
		st.DurationUntilReset = &m.reset
	}
	if over && r.QuotaMode && !r.Shadow {
		st.DurationUntilReset = nil // as the reference answers quota_mode
	}
}

// resetAfter is a decided descriptor's duration_until_reset in whole seconds: for a fixed
// window, as the reference computes it (utils.CalculateReset), the time from the current
// second to the end of the epoch-aligned window of the unit (times unit_multiplier); for
// a calendar rule, to the end of its period; for another algorithm, RateLimit's t
// (ratelimitheader.Wait).
func resetAfter(it *item, now time.Time) int64 {
	r := it.rule
	switch {
	case !r.Calendar.IsZero():
		sec := now.Truncate(time.Second)
		_, end := r.Calendar.Bounds(sec)
		return ratelimitheader.Seconds(end.Sub(sec))
	case it.status == config.Blocked || r.Limit.Algorithm == sluice.FixedWindow:
		div := int64(r.Unit.Period() / time.Second)
		if it.unitMultiplier > 1 {
			div *= int64(it.unitMultiplier)
		}
		if div <= 0 {
			return 0
		}
		return div - ((now.Unix()%div)+div)%div
	}
	return ratelimitheader.Seconds(ratelimitheader.Wait(&it.Decision))
}

// addHeaders sets the answer's response_headers_to_add, as Options.RLSHeaders asks.
func (s *Server) addHeaders(a *answer, items []item, retryAfter time.Duration) {
	h := &s.opts.RLSHeaders
	text := a.text[:0]
	if h.Reference {
		text = s.referenceHeaders(a, text)
	}
	if !h.IETF {
		return
	}
	r := ratelimitheader.Refusal{Refused: a.resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, Wait: retryAfter}
	rateLimitHeaders(text[len(text):], items, r, s.opts.ShadowHeaders, a.addHeader)
}

// referenceHeaders adds the headers of RLSHeaders.Reference to the answer, whose statuses
// are filled, and returns text with their values appended. An answer with no descriptor
// to describe has none.
func (s *Server) referenceHeaders(a *answer, text []byte) []byte {
	var pick *statusBlock
	least := uint32(math.MaxUint32)
	for i := range a.statuses {
		m := &a.statuses[i]
		st := &m.status
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			pick, least = m, st.LimitRemaining
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			pick, least = m, 0
		}
	}
	if pick == nil {
		return text
	}
	h := &s.opts.RLSHeaders
	num := func(v int64) string {
		from := len(text)
		text = strconv.AppendInt(text, v, 10)
		return unsafe.String(&text[from], len(text)-from)
	}
	a.addHeader(h.Limit, num(int64(pick.status.CurrentLimit.RequestsPerUnit)))
	a.addHeader(h.Remaining, num(int64(pick.status.LimitRemaining)))
	// Not DurationUntilReset, which a quota_mode descriptor over its limit lacks.
	a.addHeader(h.Reset, num(pick.reset.Seconds))
	return text
}

// closedResponse is the answer when the store is down and the failure mode is closed:
// every limited descriptor over the limit, retry after a second.
func (s *Server) closedResponse(items []item) *rlsv3.RateLimitResponse {
	a := newAnswer(len(items))
	now := s.now()
	a.resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	for i := range items {
		it := &items[i]
		if it.status == config.Limited {
			it.Decided = true
			it.Decision = sluice.Decision{Limit: it.Limit, Path: sluice.PathClosed, RetryAfter: time.Second}
			it.TooBig = true // over, whatever the (unknown) state
		}
		descriptorStatus(it, &a.statuses[i], now)
	}
	if s.opts.ShadowMode {
		a.resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	s.addHeaders(a, items, time.Second)
	return &a.resp
}

// unitProto maps a config.Unit to the protobuf enum by name (the numbers differ: WEEK
// is 7 there).
func unitProto(u config.Unit) rlsv3.RateLimitResponse_RateLimit_Unit {
	if int(u) < len(unitProtos) {
		return unitProtos[u]
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

var unitProtos = [...]rlsv3.RateLimitResponse_RateLimit_Unit{
	config.UnitUnknown: rlsv3.RateLimitResponse_RateLimit_UNKNOWN, config.UnitSecond: rlsv3.RateLimitResponse_RateLimit_SECOND,
	config.UnitMinute: rlsv3.RateLimitResponse_RateLimit_MINUTE, config.UnitHour: rlsv3.RateLimitResponse_RateLimit_HOUR,
	config.UnitDay: rlsv3.RateLimitResponse_RateLimit_DAY, config.UnitWeek: rlsv3.RateLimitResponse_RateLimit_WEEK,
	config.UnitMonth: rlsv3.RateLimitResponse_RateLimit_MONTH, config.UnitYear: rlsv3.RateLimitResponse_RateLimit_YEAR,
}

var _ rlsv3.RateLimitServiceServer = (*rls)(nil)
