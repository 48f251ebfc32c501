package conformance

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// rule kinds a model needs to know of a configuration: which descriptors are shadow or
// quota_mode, and which wildcards share one counter (share_threshold). Each is named by
// the key of a descriptor's first entry.
type modelConfig struct {
	shadow, quota map[string]bool
	share         map[string]string // key -> wildcard ("grp*") whose values share a counter
}

// pairModel follows the counters of both services through one run and says what each
// must answer, field by field, from the limit the reference reports for each descriptor:
//
//   - The reference counts every hit of every descriptor with a limit (its Redis INCRBY),
//     allowed or not; a descriptor is over when its count exceeds requests_per_unit.
//   - sluice counts only what a request it allows spends, as docs/envoy.md says: the
//     enforced descriptors of a request all fit, and are all spent, or none is; a
//     requests_per_unit 0 rule, or namings of one counter that together exceed its limit,
//     deny before any store call, and the others are then looked at; shadow and quota_mode
//     descriptors are decided after, each alone, spent when the request passed and they
//     fit. A counter is a (key, limit): a limit override with the configured rule's limit
//     shares its counter, one with another limit does not.
//   - Both answer duration_until_reset as the unit's length less the Unix second modulo it,
//     and the same headers, when asked for, chosen by the same rule (referenceHeaders).
//
// Anything else that differs is a difference nobody documented, and fails the test.
type pairModel struct {
	cfg          modelConfig
	headers      bool // both send the reference's three headers
	globalShadow bool // both run in global shadow mode
	ref, sl      map[string]uint64
}

func newPairModel(cfg modelConfig, headers, globalShadow bool) *pairModel {
	return &pairModel{cfg: cfg, headers: headers, globalShadow: globalShadow, ref: map[string]uint64{}, sl: map[string]uint64{}}
}

// hitsOf is a descriptor's hits: its own hits_addend when set, else the request's, at
// least 1 (the reference's GetHitsAddends).
func hitsOf(req *rlsv3.RateLimitRequest, d *ratelimitv3.RateLimitDescriptor) uint64 {
	if d.HitsAddend != nil {
		return d.HitsAddend.Value
	}
	return uint64(max(1, req.HitsAddend))
}

// unitSeconds is the reference's UnitToDivider.
func unitSeconds(u rlsv3.RateLimitResponse_RateLimit_Unit) int64 {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return 1
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return 60
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return 3600
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 86400
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * 86400
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * 86400
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * 86400
	}
	return 0
}

// resetAt is duration_until_reset for a unit at the Unix second now.
func resetAt(u rlsv3.RateLimitResponse_RateLimit_Unit, now int64) int64 {
	div := unitSeconds(u)
	return div - now%div
}

// counter names a descriptor's counter: the domain, its entries (a share_threshold
// wildcard in place of a value it matches, unless the limit is the request's override)
// and the window start; sluice's also names the limit.
func (m *pairModel) counter(domain string, d *ratelimitv3.RateLimitDescriptor, l *rlsv3.RateLimitResponse_RateLimit, now int64, sluice bool) string {
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range d.Entries {
		v := e.Value
		if p, ok := m.cfg.share[e.Key]; ok && i == 0 && d.Limit == nil && strings.HasPrefix(v, strings.TrimSuffix(p, "*")) {
			v = p
		}
		fmt.Fprintf(&b, "|%q=%q", e.Key, v)
	}
	div := unitSeconds(l.Unit)
	fmt.Fprintf(&b, "@%d", now/div*div)
	if sluice {
		fmt.Fprintf(&b, "#%d/%v", l.RequestsPerUnit, l.Unit)
	}
	return b.String()
}

// limited is one descriptor with a limit, as the model follows it.
type limited struct {
	i             int
	lim           *rlsv3.RateLimitResponse_RateLimit
	rpu, hits     uint64
	shadow, quota bool
	refKey, slKey string
	cum           uint64 // sluice: hits of its counter's namings up to and including it
	tooBig        bool
	enforced      bool
	slRem         uint64
	slOver        bool
}

// step advances the model by one request that both services answered at the Unix second
// now, b being the reference's answer (which says which limit applies to each
// descriptor), and returns what each must have answered.
func (m *pairModel) step(req *rlsv3.RateLimitRequest, b *rlsv3.RateLimitResponse, now int64) (wantRef, wantSl *rlsv3.RateLimitResponse) {
	n := len(req.Descriptors)
	wantRef = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	wantSl = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}
	var ls []*limited
	for i, d := range req.Descriptors {
		var sb *rlsv3.RateLimitResponse_DescriptorStatus
		if i < len(b.Statuses) {
			sb = b.Statuses[i]
		}
		if sb.GetCurrentLimit() == nil {
			// No rule, a replaced one, unlimited, an unknown domain: counted by neither.
			// limit_remaining is 0, or 4294967295 for unlimited (the reference's answer
			// says which; any other value is the model's error, and fails).
			rem := uint32(0)
			if sb.GetLimitRemaining() == math.MaxUint32 {
				rem = math.MaxUint32
			}
			wantRef.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: rem}
			wantSl.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: rem}
			continue
		}
		lim := proto.Clone(sb.CurrentLimit).(*rlsv3.RateLimitResponse_RateLimit)
		k := ""
		if len(d.Entries) > 0 {
			k = d.Entries[0].Key
		}
		l := &limited{i: i, lim: lim, rpu: uint64(lim.RequestsPerUnit), hits: hitsOf(req, d),
			shadow: m.cfg.shadow[k] && d.Limit == nil, quota: m.cfg.quota[k] && d.Limit == nil,
			refKey: m.counter(req.Domain, d, lim, now, false), slKey: m.counter(req.Domain, d, lim, now, true)}
		l.enforced = !l.shadow && !l.quota
		ls = append(ls, l)
	}

	// The reference: every hit counts.
	for _, l := range ls {
		m.ref[l.refKey] += l.hits
		after := m.ref[l.refKey]
		over := after > l.rpu
		rem := uint64(0)
		if !over {
			rem = l.rpu - after
		}
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: l.lim, LimitRemaining: uint32(rem),
			DurationUntilReset: &durationpb.Duration{Seconds: resetAt(l.lim.Unit, now)}}
		switch {
		case over && l.quota:
			st.DurationUntilReset = nil
		case over && !l.shadow:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			wantRef.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		wantRef.Statuses[l.i] = st
	}

	// sluice: what an allowed request spends, all or nothing.
	sum := map[string]uint64{}
	denied := false
	for _, l := range ls {
		sum[l.slKey] += l.hits
		l.cum = sum[l.slKey]
		l.tooBig = l.cum > l.rpu
		if l.enforced && (l.tooBig || l.rpu == 0) {
			denied = true // before any store call
		}
	}
	looked := denied
	if !denied {
		for _, l := range ls {
			if l.enforced && m.sl[l.slKey]+sum[l.slKey] > l.rpu {
				denied = true
			}
		}
	}
	for _, l := range ls {
		if !l.enforced {
			continue
		}
		used := m.sl[l.slKey]
		l.slRem = l.rpu - min(used, l.rpu)
		switch {
		case !denied:
			l.slRem = l.rpu - used - l.cum
		case l.rpu == 0 || l.tooBig:
			l.slOver = true
		case looked:
			// Looked at (cost 0) after a denial made before any store call: over when
			// nothing is left.
			l.slOver = l.slRem == 0
		default:
			// Denied in the store call: a naming is over when it and the ones before it
			// do not fit.
			l.slOver = used+l.cum > l.rpu
		}
	}
	if !denied {
		for _, l := range ls {
			if l.enforced && l.cum == sum[l.slKey] {
				m.sl[l.slKey] += sum[l.slKey]
			}
		}
	}
	for _, l := range ls {
		if l.enforced {
			continue
		}
		used := m.sl[l.slKey]
		l.slRem = l.rpu - min(used, l.rpu)
		switch {
		case denied || l.tooBig:
			l.slOver = l.tooBig || l.slRem == 0 // looked at
		case used+l.hits <= l.rpu:
			m.sl[l.slKey] += l.hits
			l.slRem = l.rpu - used - l.hits
		default:
			l.slOver = true
		}
	}
	for _, l := range ls {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, CurrentLimit: l.lim, LimitRemaining: uint32(l.slRem),
			DurationUntilReset: &durationpb.Duration{Seconds: resetAt(l.lim.Unit, now)}}
		switch {
		case l.slOver && l.quota && !l.shadow:
			st.DurationUntilReset = nil
		case l.slOver && l.enforced:
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		wantSl.Statuses[l.i] = st
	}
	if denied {
		wantSl.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if m.headers {
		wantRef.ResponseHeadersToAdd = referenceHeaders(wantRef, now)
		wantSl.ResponseHeadersToAdd = referenceHeaders(wantSl, now)
	}
	if m.globalShadow {
		wantRef.OverallCode, wantSl.OverallCode = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK
	}
	return wantRef, wantSl
}

// referenceHeaders are the reference's LIMIT_RESPONSE_HEADERS_ENABLED headers of an
// answer, as its README describes them and its service picks the descriptor: the last
// one OVER_LIMIT, else the first with the least limit_remaining among those with a
// current_limit; none without one.
func referenceHeaders(r *rlsv3.RateLimitResponse, now int64) []*corev3.HeaderValue {
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	least := uint32(math.MaxUint32)
	for _, st := range r.Statuses {
		if st.CurrentLimit != nil && st.LimitRemaining < least {
			pick, least = st, st.LimitRemaining
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			pick, least = st, 0
		}
	}
	if pick == nil {
		return nil
	}
	return []*corev3.HeaderValue{
		{Key: "RateLimit-Limit", Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: "RateLimit-Remaining", Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: "RateLimit-Reset", Value: strconv.FormatInt(resetAt(pick.CurrentLimit.Unit, now), 10)},
	}
}

// withoutTimes is r with every duration_until_reset's seconds and the reset header's
// value cleared (their presence kept), for a round whose answers straddle a second.
func withoutTimes(r *rlsv3.RateLimitResponse) *rlsv3.RateLimitResponse {
	r = proto.Clone(r).(*rlsv3.RateLimitResponse)
	for _, st := range r.Statuses {
		if st.DurationUntilReset != nil {
			st.DurationUntilReset.Seconds = 0
		}
	}
	for _, h := range r.ResponseHeadersToAdd {
		if h.Key == "RateLimit-Reset" {
			h.Value = ""
		}
	}
	return r
}

// pair sends the same requests to sluice and to the reference and compares the whole
// answers with what the model says each must be.
type pair struct {
	t        *testing.T
	sl, ref  rlsv3.RateLimitServiceClient
	model    *pairModel
	compared int // rounds whose answers were compared whole
	// straddled counts rounds answered across a second boundary: compared but for the
	// seconds of duration_until_reset and the reset header, and sent again (unless once).
	straddled  int
	mismatches int
	denied     [2]int // by sluice, by the reference
	// once sends every round once: a straddling round is compared without its times and
	// not sent again. Scenarios set it, since their steps expect fixed counts, which a
	// round sent again would change.
	once bool
}

// maxStraddleRetries bounds how often send repeats a round that straddled a second.
const maxStraddleRetries = 3

// send has both services answer req in one round (sluice first), compares the answers
// with the model's, and returns sluice's. A round whose answers straddle a second
// boundary is compared without the times and sent again, up to maxStraddleRetries times,
// until one falls in one second.
func (p *pair) send(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	p.t.Helper()
	for try := 0; ; try++ {
		before := time.Now().Unix()
		a, errA := p.sl.ShouldRateLimit(context.Background(), req)
		b, errB := p.ref.ShouldRateLimit(context.Background(), req)
		after := time.Now().Unix()
		if errA != nil || errB != nil {
			if (errA == nil) != (errB == nil) {
				p.fail(req, fmt.Sprintf("sluice error %v, reference error %v", errA, errB), "", "")
			}
			// Both refuse it: the reference's messages are sluice's, its gRPC code Unknown
			// (a plain error) where sluice's is InvalidArgument.
			if errA != nil && errB != nil && status.Convert(errA).Message() != status.Convert(errB).Message() {
				p.fail(req, fmt.Sprintf("sluice refuses with %q, the reference with %q", status.Convert(errA).Message(), status.Convert(errB).Message()), "", "")
			}
			return a
		}
		wantRef, wantSl := p.model.step(req, b, before)
		if a.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			p.denied[0]++
		}
		if b.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			p.denied[1]++
		}
		straddled := before != after
		gotA, gotB := a, b
		if straddled {
			gotA, gotB, wantRef, wantSl = withoutTimes(a), withoutTimes(b), withoutTimes(wantRef), withoutTimes(wantSl)
			p.straddled++
		} else {
			p.compared++
		}
		if !proto.Equal(gotB, wantRef) {
			p.fail(req, "the reference's answer is not the model's (the test's model of the reference is wrong)", compact(gotB), compact(wantRef))
		} else if !proto.Equal(gotA, wantSl) {
			p.fail(req, "sluice's answer is not the reference's with the documented differences", compact(gotA), compact(wantSl)+"\n  the reference: "+compact(gotB))
		}
		if !straddled || try == maxStraddleRetries || p.once {
			return a
		}
	}
}

func (p *pair) fail(req *rlsv3.RateLimitRequest, what, got, want string) {
	p.t.Helper()
	p.mismatches++
	if p.mismatches <= 10 {
		p.t.Errorf("%s %s:\n  got:  %s\n  want: %s", show(req), what, got, want)
	}
}

// report logs the run's counts and fails a run that compared nothing.
func (p *pair) report(minCompared int) {
	p.t.Helper()
	p.t.Logf("%d responses of each service compared whole (%d more compared but for their times, straddling a second, and sent again); %d mismatches; denied by sluice %d, by the reference %d",
		p.compared, p.straddled, p.mismatches, p.denied[0], p.denied[1])
	if p.compared < minCompared {
		p.t.Errorf("%d responses compared whole, fewer than the %d this run must compare", p.compared, minCompared)
	}
}

// compact is m in the text format on one line.
func compact(m proto.Message) string {
	// prototext puts one or two spaces between fields at random, so that no one depends on
	// its output: one space, always, for a comparison.
	return strings.Join(strings.Fields(prototext.MarshalOptions{}.Format(m)), " ")
}
