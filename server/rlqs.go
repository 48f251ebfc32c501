package server

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/quota"
)

// RateLimitQuotaServiceName is the RLQS gRPC service, as the gRPC health service knows it.
const RateLimitQuotaServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// Defaults of QuotaOptions: filled, they fit the shipped chart's memory limit beside the
// service's other bounds.
const (
	DefaultQuotaMaxStreams          = 500
	DefaultQuotaMaxBucketsPerStream = 100
	DefaultQuotaFirstReportTimeout  = time.Minute
	// UnmatchedTTL is the assignment_time_to_live of the ALLOW_ALL answered for a bucket
	// no rule matches (and for every bucket of an unknown domain).
	UnmatchedTTL = time.Minute
)

// QuotaOptions configures the Rate Limit Quota Service. The zero value works: assignments
// in process memory, default caps.
type QuotaOptions struct {
	// Store keeps the assignments (stack.Stack.Quota). Nil: a quota.Memory.
	Store quota.Store
	// MaxStreams caps the RLQS streams open at once on this instance; one more is
	// refused with RESOURCE_EXHAUSTED. 0: DefaultQuotaMaxStreams.
	MaxStreams int
	// MaxBucketsPerStream caps the distinct buckets one stream reports on; a report on
	// one more is answered with abandon_action. 0: DefaultQuotaMaxBucketsPerStream.
	MaxBucketsPerStream int
	// FirstReportTimeout ends a stream that sends no report for that long after it
	// opened (DEADLINE_EXCEEDED). 0: DefaultQuotaFirstReportTimeout.
	FirstReportTimeout time.Duration
}

// rlqs implements envoy.service.rate_limit_quota.v3.RateLimitQuotaService.
type rlqs struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	s    *Server
	opts QuotaOptions // defaulted

	mu      sync.Mutex
	streams int
	buckets map[string]int // bucket key -> streams of this instance reporting on it
	m       *quotaMetrics
}

func newRLQS(s *Server, o QuotaOptions, reg prometheus.Registerer) (*rlqs, error) {
	if o.Store == nil {
		o.Store = quota.NewMemory(nil)
	}
	o.MaxStreams = orPositive(o.MaxStreams, DefaultQuotaMaxStreams)
	o.MaxBucketsPerStream = orPositive(o.MaxBucketsPerStream, DefaultQuotaMaxBucketsPerStream)
	o.FirstReportTimeout = orPositive(o.FirstReportTimeout, DefaultQuotaFirstReportTimeout)
	q := &rlqs{s: s, opts: o, buckets: map[string]int{}}
	var err error
	q.m, err = newQuotaMetrics(reg, q)
	return q, err
}

// streamBucket is what a stream keeps about one bucket it reported on.
type streamBucket struct {
	rule            *config.QuotaBucket // nil: no rule matched
	allowed, denied prometheus.Counter
	assigned        prometheus.Gauge
	share           int64 // the share last answered; -2 before the first
}

// StreamRateLimitQuotas serves one proxy: each report gets one response with one action
// per reported bucket, in order. docs/envoy.md states the answers.
func (q *rlqs) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	q.mu.Lock()
	if q.streams >= q.opts.MaxStreams {
		q.mu.Unlock()
		q.m.refused.Inc()
		return status.Errorf(codes.ResourceExhausted, "rlqs: %d streams already open on this instance", q.opts.MaxStreams)
	}
	q.streams++
	q.mu.Unlock()
	st := &quotaStream{q: q, ctx: stream.Context(), id: rand.Text(), buckets: map[string]*streamBucket{}}
	defer st.close()

	msgs := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case msgs <- m:
			case <-st.ctx.Done():
				return
			}
		}
	}()
	first := time.NewTimer(q.opts.FirstReportTimeout)
	defer first.Stop()
	for {
		var m *rlqsv3.RateLimitQuotaUsageReports
		select {
		case m = <-msgs:
			first.Stop()
		case err := <-errc:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-first.C:
			return status.Errorf(codes.DeadlineExceeded, "rlqs: no usage report within %v of opening the stream", q.opts.FirstReportTimeout)
		case <-st.ctx.Done():
			return st.ctx.Err()
		}
		resp, err := st.report(m)
		if err != nil {
			return err
		}
		if resp != nil {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// quotaStream is one proxy's stream: one client of every bucket it reports on.
type quotaStream struct {
	q       *rlqs
	ctx     context.Context
	id      string
	domain  string
	buckets map[string]*streamBucket
	reps    []quota.Report
	out     []quota.Assignment
	idx     []int // reps[j] answers usage idx[j]
}

func (st *quotaStream) close() {
	q := st.q
	q.mu.Lock()
	q.streams--
	for k := range st.buckets {
		if q.buckets[k]--; q.buckets[k] <= 0 {
			delete(q.buckets, k)
		}
	}
	q.mu.Unlock()
}

// report answers one usage report. A nil response with a nil error means the store
// failed: nothing is answered, and the proxy keeps its assignments until their TTL.
func (st *quotaStream) report(m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	q := st.q
	switch d := m.GetDomain(); {
	case st.domain == "" && d == "":
		return nil, status.Error(codes.InvalidArgument, "rlqs: the first usage report must carry the domain")
	case st.domain == "":
		st.domain = d
	case d != "" && d != st.domain:
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: a stream serves one domain (%q); open a new stream for %q", st.domain, d)
	}
	cfg := q.s.config()
	dom, known := cfg.QuotaDomain(st.domain)
	if !known {
		q.m.unknownDomain.Inc()
	}
	usages := m.GetBucketQuotaUsages()
	resp := &rlqsv3.RateLimitQuotaResponse{BucketAction: make([]*rlqsv3.RateLimitQuotaResponse_BucketAction, len(usages))}
	act := func(i int, kind string, a *rlqsv3.RateLimitQuotaResponse_BucketAction) {
		resp.BucketAction[i] = a
		q.m.action[kind].Inc()
	}
	st.reps, st.idx = st.reps[:0], st.idx[:0]
	for i, u := range usages {
		id := u.GetBucketId()
		if err := config.ValidBucketID(id.GetBucket()); err != nil {
			act(i, "abandon_malformed", abandon(id))
			continue
		}
		if !known {
			act(i, "unknown_domain", blanket(id, typev3.RateLimitStrategy_ALLOW_ALL, UnmatchedTTL))
			continue
		}
		match, ok := dom.Match(id.GetBucket())
		if !ok {
			act(i, "no_match", blanket(id, typev3.RateLimitStrategy_ALLOW_ALL, UnmatchedTTL))
			continue
		}
		sb := st.bucket(match)
		if sb == nil {
			act(i, "abandon_too_many_buckets", abandon(id))
			continue
		}
		b := match.Bucket
		sb.allowed.Add(float64(u.GetNumRequestsAllowed()))
		sb.denied.Add(float64(u.GetNumRequestsDenied()))
		switch {
		case b.Unlimited:
			act(i, "allow_all", blanket(id, typev3.RateLimitStrategy_ALLOW_ALL, b.TTL))
			continue
		case b.Rate == 0:
			act(i, "deny_all", blanket(id, typev3.RateLimitStrategy_DENY_ALL, b.TTL))
			continue
		}
		demand := quota.Demand(u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), u.GetTimeElapsed().AsDuration(), b.Period, quota.DemandCap*b.Rate)
		st.reps = append(st.reps, quota.Report{Key: match.Key, Client: st.id, Rate: b.Rate, Weight: quota.Weight(demand, b.Rate), TTL: b.TTL})
		st.idx = append(st.idx, i)
	}
	if len(st.reps) > 0 {
		if cap(st.out) < len(st.reps) {
			st.out = make([]quota.Assignment, len(st.reps))
		}
		if err := q.opts.Store.Rebalance(st.ctx, st.reps, st.out); err != nil {
			q.m.storeErrors.Inc()
			q.s.log.Warn("rlqs: store failed; report not answered", slog.String("domain", st.domain), slog.String("error", err.Error()))
			return nil, nil
		}
		for j, rep := range st.reps {
			i := st.idx[j]
			a := st.out[j]
			id := usages[i].GetBucketId()
			sb := st.buckets[rep.Key]
			b := sb.rule
			switch {
			case a.Rate < 0:
				act(i, "abandon_bucket_full", abandon(id))
			case a.Rate == 0:
				act(i, "deny_all", blanket(id, typev3.RateLimitStrategy_DENY_ALL, b.TTL))
			default:
				act(i, "token_bucket", tokenBucket(id, a.Rate, b))
			}
			sb.assigned.Set(float64(a.Assigned) / b.Period.Seconds())
			// One line per rebalance: info when the client's share moved, else debug.
			level := slog.LevelDebug
			if a.Rate != sb.share {
				level = slog.LevelInfo
			}
			sb.share = a.Rate
			if q.s.log.Enabled(st.ctx, level) {
				q.s.log.LogAttrs(st.ctx, level, "rlqs rebalance",
					slog.String("domain", st.domain), slog.String("bucket", b.Name), slog.String("key", rep.Key),
					slog.String("client", st.id), slog.Int64("demand_weight", rep.Weight), slog.Int64("share", a.Rate),
					slog.Int64("clients", a.Clients), slog.Int64("assigned", a.Assigned), slog.Int64("limit", b.Rate),
					slog.Duration("period", b.Period))
			}
		}
	}
	return resp, nil
}

// bucket returns the stream's entry for a matched bucket, making it unless the stream
// already holds MaxBucketsPerStream (then nil).
func (st *quotaStream) bucket(m config.QuotaMatch) *streamBucket {
	if sb := st.buckets[m.Key]; sb != nil && sb.rule == m.Bucket {
		return sb
	} else if sb == nil && len(st.buckets) >= st.q.opts.MaxBucketsPerStream {
		return nil
	} else if sb == nil {
		st.q.mu.Lock()
		st.q.buckets[m.Key]++
		st.q.mu.Unlock()
	}
	// New, or the rule changed with a reload.
	sb := &streamBucket{rule: m.Bucket, share: -2}
	sb.allowed = st.q.m.reported.WithLabelValues(st.domain, m.Bucket.Name, "allowed")
	sb.denied = st.q.m.reported.WithLabelValues(st.domain, m.Bucket.Name, "denied")
	sb.assigned = st.q.m.assigned.WithLabelValues(st.domain, m.Bucket.Name)
	st.buckets[m.Key] = sb
	return sb
}

func action(id *rlqsv3.BucketId, ttl time.Duration, s *typev3.RateLimitStrategy) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl),
				RateLimitStrategy:    s,
			},
		},
	}
}

func blanket(id *rlqsv3.BucketId, rule typev3.RateLimitStrategy_BlanketRule, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return action(id, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}})
}

// tokenBucket is a share as the proxy enforces it: share tokens per period, at most
// quota.TokenBucket(share, rate, burst) held.
func tokenBucket(id *rlqsv3.BucketId, share int64, b *config.QuotaBucket) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return action(id, b.TTL, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{
		TokenBucket: &typev3.TokenBucket{
			MaxTokens:     uint32(quota.TokenBucket(share, b.Rate, b.Burst)),
			TokensPerFill: wrapperspb.UInt32(uint32(share)),
			FillInterval:  durationpb.New(b.Period),
		},
	}})
}

func abandon(id *rlqsv3.BucketId) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

var quotaActions = []string{"token_bucket", "allow_all", "deny_all", "no_match", "unknown_domain",
	"abandon_malformed", "abandon_too_many_buckets", "abandon_bucket_full"}

// quotaMetrics are the RLQS metrics. Labels name rules, never bucket id values.
type quotaMetrics struct {
	reported      *prometheus.CounterVec
	assigned      *prometheus.GaugeVec
	actions       *prometheus.CounterVec
	action        map[string]prometheus.Counter // actions' children, made once
	unknownDomain prometheus.Counter
	storeErrors   prometheus.Counter
	refused       prometheus.Counter
}

func newQuotaMetrics(reg prometheus.Registerer, q *rlqs) (*quotaMetrics, error) {
	m := &quotaMetrics{
		reported:      newCounterVec("sluice_rlqs_reported_requests_total", "Requests proxies reported on RLQS buckets, by domain, bucket rule and result (allowed, denied).", "domain", "bucket", "result"),
		assigned:      newGaugeVec("sluice_rlqs_assigned_rate", "Requests per second assigned to all clients of a bucket (never above its limit), by domain and bucket rule, as of its last rebalance on this instance.", "domain", "bucket"),
		actions:       newCounterVec("sluice_rlqs_bucket_actions_total", "Bucket actions answered, by kind (token_bucket, allow_all, deny_all, no_match, unknown_domain, abandon_malformed, abandon_too_many_buckets, abandon_bucket_full).", "action"),
		unknownDomain: newCounter("sluice_rlqs_unknown_domain_total", "Usage reports for a domain the configuration has no quota domain for (every bucket answered ALLOW_ALL)."),
		storeErrors:   newCounter("sluice_rlqs_store_errors_total", "Usage reports left unanswered because the store failed."),
		refused:       newCounter("sluice_rlqs_streams_refused_total", "RLQS streams refused because the instance had its maximum open."),
	}
	m.action = map[string]prometheus.Counter{}
	for _, a := range quotaActions {
		m.action[a] = m.actions.WithLabelValues(a)
	}
	cs := []prometheus.Collector{m.reported, m.assigned, m.actions, m.unknownDomain, m.storeErrors, m.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_rlqs_clients", Help: "RLQS streams (connected clients) open on this instance."}, func() float64 { q.mu.Lock(); defer q.mu.Unlock(); return float64(q.streams) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_rlqs_buckets", Help: "Distinct RLQS buckets the clients connected to this instance report on."}, func() float64 { q.mu.Lock(); defer q.mu.Unlock(); return float64(len(q.buckets)) }),
	}
	if err := register(reg, cs); err != nil {
		return nil, err
	}
	return m, nil
}
