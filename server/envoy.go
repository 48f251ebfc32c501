package server

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// rls implements envoy.service.ratelimit.v3.RateLimitService.
type rls struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Server
}

// ShouldRateLimit answers one request of Envoy's rate limit filter. See the package doc
// for how each field is filled.
func (r *rls) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return r.s.ShouldRateLimit(ctx, req)
}

// ShouldRateLimit decides an Envoy rate limit request against the configuration in force.
// It is what the gRPC service calls; it is exported so that other transports can use it.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	start := time.Now()
	resp, err := s.shouldRateLimit(ctx, req)
	code := "error"
	switch {
	case err != nil:
		if st, ok := status.FromError(err); ok && st.Code() == codes.InvalidArgument {
			code = "invalid"
		}
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		code = "over_limit"
	default:
		code = "ok"
	}
	s.metrics.observe(apiGRPC, code, time.Since(start))
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
	dom, ok := cfg.Domain(req.Domain)
	if !ok {
		// As the reference implementation: an unknown domain limits nothing.
		s.metrics.unknownDomain.Inc()
		resp := &rlsv3.RateLimitResponse{
			OverallCode: rlsv3.RateLimitResponse_OK,
			Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.Descriptors)),
		}
		for i := range resp.Statuses {
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		}
		return resp, nil
	}

	descs := make([]config.Descriptor, len(req.Descriptors))
	mults := make([]uint32, len(req.Descriptors))
	for i, d := range req.Descriptors {
		if len(d.GetEntries()) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "descriptor %d has no entries", i)
		}
		entries := make([]config.Entry, len(d.Entries))
		for j, e := range d.Entries {
			entries[j] = config.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		descs[i].Entries = entries
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
	}
	hits := make([]int64, len(req.Descriptors))
	for i, d := range req.Descriptors {
		hits[i] = int64(req.GetHitsAddend())
		if hits[i] == 0 {
			hits[i] = 1
		}
		if h := d.GetHitsAddend(); h != nil {
			hits[i] = int64(min(h.GetValue(), math.MaxInt64))
		}
		if d.GetIsNegativeHits() {
			// Returning quota is not part of sluice's model (denied requests spend nothing,
			// so there is nothing to refund): report the state without spending.
			hits[i] = 0
		}
	}
	items, err := s.domainItems(dom, descs, mults, hits)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	ctx = s.decisionContext(ctx, cfg, dom.Name, config.FailureUnset, 0)
	allowed, err := s.decide(ctx, items)
	if err != nil {
		if errors.Is(err, sluice.ErrStoreUnavailable) {
			// Fail closed: Envoy must deny, and only OVER_LIMIT makes it deny (an error
			// would be failed open by Envoy's default failure_mode_deny: false).
			return s.closedResponse(items), nil
		}
		s.metrics.storeErrors.Inc()
		s.log.LogAttrs(ctx, slog.LevelError, "rate limit not decided", slog.String("domain", dom.Name), slog.String("error", err.Error()))
		return nil, status.Error(codes.Unavailable, "rate limit store unavailable")
	}

	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(items)),
	}
	if !allowed && !s.shadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	for i := range items {
		resp.Statuses[i] = descriptorStatus(&items[i])
		s.metrics.descriptor(dom.Name, &items[i])
	}
	ra := time.Duration(0)
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		ra = retryAfter(items)
	}
	if p, l, retry := rateLimitHeaders(items, ra); p != "" || retry != "" {
		h := make([]*corev3.HeaderValue, 0, 3)
		if p != "" {
			h = append(h, &corev3.HeaderValue{Key: "RateLimit-Policy", Value: p}, &corev3.HeaderValue{Key: "RateLimit", Value: l})
		}
		if retry != "" {
			h = append(h, &corev3.HeaderValue{Key: "Retry-After", Value: retry})
		}
		resp.ResponseHeadersToAdd = h
	}
	if !allowed {
		s.logDenied(ctx, dom.Name, items)
	}
	return resp, nil
}

// descriptorStatus is one descriptor's answer, as the reference implementation fills it:
//
//   - no rule, or a replaced rule: OK, no current_limit, limit_remaining 0;
//   - unlimited: OK, no current_limit, limit_remaining 4294967295;
//   - requests_per_unit 0: OVER_LIMIT (OK in shadow mode), limit_remaining 0,
//     duration_until_reset the end of the unit's window;
//   - otherwise the decision: OVER_LIMIT when over (OK in shadow mode), limit_remaining
//     Decision.Remaining, duration_until_reset Decision.RetryAfter when over, else
//     Decision.ResetAfter.
func descriptorStatus(it *item) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	switch it.status {
	case config.NoMatch, config.Replaced:
		return st
	case config.Unlimited:
		st.LimitRemaining = math.MaxUint32
		return st
	}
	r := it.rule
	st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{
		Name:            r.Name,
		RequestsPerUnit: r.RequestsPerUnit,
		Unit:            unitProto(r.Unit),
	}
	if it.unitMultiplier > 1 {
		st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(it.unitMultiplier)
	}
	over := it.over()
	if over && !it.shadow {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if it.decided {
		st.LimitRemaining = uint32(min(it.dec.Remaining, math.MaxUint32))
		d := it.dec.ResetAfter
		if over && it.dec.RetryAfter > 0 {
			d = it.dec.RetryAfter
		}
		st.DurationUntilReset = durationpb.New(d)
	}
	return st
}

// closedResponse is the answer when the store is down and the failure mode is closed:
// every limited descriptor over the limit.
func (s *Server) closedResponse(items []item) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(items)),
	}
	for i := range items {
		it := &items[i]
		if it.status == config.Limited {
			it.decided = true
			it.dec = sluice.Decision{Limit: it.limit, Path: sluice.PathClosed, RetryAfter: time.Second}
			it.tooBig = true // over, whatever the (unknown) state
		}
		resp.Statuses[i] = descriptorStatus(it)
	}
	if s.shadowMode {
		resp.OverallCode = rlsv3.RateLimitResponse_OK
	}
	return resp
}

// unitProto maps a config.Unit to the protobuf enum by name (the numbers differ: WEEK
// is 7 there).
func unitProto(u config.Unit) rlsv3.RateLimitResponse_RateLimit_Unit {
	switch u {
	case config.UnitSecond:
		return rlsv3.RateLimitResponse_RateLimit_SECOND
	case config.UnitMinute:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE
	case config.UnitHour:
		return rlsv3.RateLimitResponse_RateLimit_HOUR
	case config.UnitDay:
		return rlsv3.RateLimitResponse_RateLimit_DAY
	case config.UnitWeek:
		return rlsv3.RateLimitResponse_RateLimit_WEEK
	case config.UnitMonth:
		return rlsv3.RateLimitResponse_RateLimit_MONTH
	case config.UnitYear:
		return rlsv3.RateLimitResponse_RateLimit_YEAR
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

var _ rlsv3.RateLimitServiceServer = (*rls)(nil)
