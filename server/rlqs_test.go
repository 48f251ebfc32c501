package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/stack"
)

const quotaConfig = `
quota_domains:
  - domain: edge
    buckets:
      - name: per-name
        bucket_id: {name: "*"}
        rate: 100
        period: 1s
        burst: 10
        reporting_interval: 1s
        assignment_ttl: 3s
      - name: closed
        bucket_id: {name: closed}
        rate: 0
        period: 1s
      - name: open
        bucket_id: {name: open}
        unlimited: true
`

func quotaCfg(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Parse(config.File{Name: "quota.yaml", Data: []byte(quotaConfig)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// quotaServer serves quotaConfig on a memory stack whose clock the test moves.
func quotaServer(t *testing.T, qo QuotaOptions) (*running, *clocktest.Clock) {
	return quotaServerLog(t, qo, nil)
}

func quotaServerLog(t *testing.T, qo QuotaOptions, log *slog.Logger) (*running, *clocktest.Clock) {
	t.Helper()
	c := clocktest.New(t0)
	cfg := quotaCfg(t)
	st := openStack(t, cfg, stack.Options{Clock: c.Now})
	if qo.Store == nil {
		qo.Store = st.Quota
	}
	s, err := New(Options{Limiter: st.Limiter(), Config: cfg, Quota: qo, Registry: prometheus.NewRegistry(), Now: c.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, s), c
}

type quotaClient struct {
	t      *testing.T
	stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel context.CancelFunc
}

func openQuota(t *testing.T, r *running) *quotaClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(r.conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return &quotaClient{t: t, stream: s, cancel: cancel}
}

type usage struct {
	id              map[string]string
	allowed, denied uint64
}

// report sends one usage report (each usage over one second) and returns the response.
func (c *quotaClient) report(domain string, us ...usage) (*rlqsv3.RateLimitQuotaResponse, error) {
	c.t.Helper()
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: domain}
	for _, u := range us {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: u.id},
			TimeElapsed:        durationpb.New(time.Second),
			NumRequestsAllowed: u.allowed,
			NumRequestsDenied:  u.denied,
		})
	}
	if err := c.stream.Send(m); err != nil && err != io.EOF {
		return nil, err
	}
	return c.stream.Recv()
}

func (c *quotaClient) mustReport(domain string, us ...usage) *rlqsv3.RateLimitQuotaResponse {
	c.t.Helper()
	resp, err := c.report(domain, us...)
	if err != nil {
		c.t.Fatalf("report: %v", err)
	}
	if len(resp.BucketAction) != len(us) {
		c.t.Fatalf("%d actions for %d buckets", len(resp.BucketAction), len(us))
	}
	for i, a := range resp.BucketAction {
		if !equalIDs(a.GetBucketId().GetBucket(), us[i].id) {
			c.t.Fatalf("action %d is for %v, want %v", i, a.GetBucketId().GetBucket(), us[i].id)
		}
	}
	return resp
}

func equalIDs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// kind describes an action: "tokens:<per fill>/<max>", "allow", "deny" or "abandon".
func kind(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	if a.GetAbandonAction() != nil {
		return "abandon"
	}
	s := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
	switch s.GetBlanketRule() {
	case typev3.RateLimitStrategy_ALLOW_ALL:
		if s.GetTokenBucket() == nil {
			return "allow"
		}
	case typev3.RateLimitStrategy_DENY_ALL:
		return "deny"
	}
	if tb := s.GetTokenBucket(); tb != nil {
		return "tokens"
	}
	return "?"
}

func share(a *rlqsv3.RateLimitQuotaResponse_BucketAction) int64 {
	return int64(a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket().GetTokensPerFill().GetValue())
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), msg) {
		t.Fatalf("error %v, want %v containing %q", err, code, msg)
	}
}

func TestRLQSConformance(t *testing.T) {
	name := func(v string) map[string]string { return map[string]string{"name": v} }

	t.Run("first report must carry the domain", func(t *testing.T) {
		r, _ := quotaServer(t, QuotaOptions{})
		_, err := openQuota(t, r).report("", usage{id: name("a")})
		wantCode(t, err, codes.InvalidArgument, "first usage report must carry the domain")
	})

	t.Run("every bucket gets an action", func(t *testing.T) {
		r, _ := quotaServer(t, QuotaOptions{})
		c := openQuota(t, r)
		resp := c.mustReport("edge",
			usage{id: name("a"), allowed: 50},
			usage{id: map[string]string{"other": "x"}}, // matches no rule
			usage{id: name("closed"), allowed: 3},
			usage{id: name("open")},
			usage{id: map[string]string{}},                                 // malformed: empty
			usage{id: map[string]string{"name": strings.Repeat("x", 300)}}, // malformed: too long
		)
		want := []string{"tokens", "allow", "deny", "allow", "abandon", "abandon"}
		for i, a := range resp.BucketAction {
			if got := kind(a); got != want[i] {
				t.Errorf("action %d: %s, want %s (%v)", i, got, want[i], a)
			}
		}
		tb := resp.BucketAction[0].GetQuotaAssignmentAction()
		if ttl := tb.GetAssignmentTimeToLive().AsDuration(); ttl != 3*time.Second {
			t.Errorf("ttl %v", ttl)
		}
		b := tb.GetRateLimitStrategy().GetTokenBucket()
		if s := b.GetTokensPerFill().GetValue(); s == 0 || s > 100 || b.GetFillInterval().AsDuration() != time.Second || b.GetMaxTokens() < 1 || b.GetMaxTokens() > 10 {
			t.Errorf("token bucket %v", b)
		}
		if ttl := resp.BucketAction[1].GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration(); ttl != UnmatchedTTL {
			t.Errorf("unmatched ttl %v", ttl)
		}
	})

	t.Run("later reports must not change the domain", func(t *testing.T) {
		r, _ := quotaServer(t, QuotaOptions{})
		c := openQuota(t, r)
		c.mustReport("edge", usage{id: name("a")})
		c.mustReport("", usage{id: name("a")})     // the domain omitted, as the protocol says
		c.mustReport("edge", usage{id: name("a")}) // repeated unchanged: tolerated
		_, err := c.report("other", usage{id: name("a")})
		wantCode(t, err, codes.InvalidArgument, "a stream serves one domain")
	})

	t.Run("unknown domain allows all", func(t *testing.T) {
		r, _ := quotaServer(t, QuotaOptions{})
		resp := openQuota(t, r).mustReport("nowhere", usage{id: name("a")}, usage{id: name("b")})
		for _, a := range resp.BucketAction {
			if kind(a) != "allow" {
				t.Errorf("%v", a)
			}
		}
	})

	t.Run("abandon past the bucket cap", func(t *testing.T) {
		r, _ := quotaServer(t, QuotaOptions{MaxBucketsPerStream: 2})
		c := openQuota(t, r)
		resp := c.mustReport("edge", usage{id: name("a")}, usage{id: name("b")}, usage{id: name("c")}, usage{id: name("a")})
		want := []string{"tokens", "tokens", "abandon", "tokens"}
		for i, a := range resp.BucketAction {
			if kind(a) != want[i] {
				t.Errorf("action %d: %s, want %s", i, kind(a), want[i])
			}
		}
		// Still abandoned at the next report; the two held buckets still answered.
		resp = c.mustReport("", usage{id: name("c")}, usage{id: name("b")})
		if kind(resp.BucketAction[0]) != "abandon" || kind(resp.BucketAction[1]) != "tokens" {
			t.Errorf("%v", resp.BucketAction)
		}
	})

	t.Run("stream cap", func(t *testing.T) {
		r, _ := quotaServer(t, QuotaOptions{MaxStreams: 1})
		c := openQuota(t, r)
		c.mustReport("edge", usage{id: name("a")})
		_, err := openQuota(t, r).report("edge", usage{id: name("a")})
		wantCode(t, err, codes.ResourceExhausted, "streams already open")
		c.cancel()
		// The slot frees when the first stream ends (waited for, not slept on).
		var lastErr error
		poll.UntilDescribed(t, 10*time.Second, "the slot to free", func() bool {
			_, lastErr = openQuota(t, r).report("edge", usage{id: name("a")})
			return lastErr == nil
		}, func() string { return fmt.Sprint(lastErr) })
	})

	t.Run("a stream that sends nothing", func(t *testing.T) {
		r, _ := quotaServer(t, QuotaOptions{FirstReportTimeout: 50 * time.Millisecond})
		c := openQuota(t, r)
		_, err := c.stream.Recv()
		wantCode(t, err, codes.DeadlineExceeded, "no usage report within 50ms")
	})

	t.Run("reconnect", func(t *testing.T) {
		r, clock := quotaServer(t, QuotaOptions{})
		busy := usage{id: name("a"), allowed: 100, denied: 400}
		c1 := openQuota(t, r)
		s1 := share(c1.mustReport("edge", busy).BucketAction[0])
		if s1 < 80 {
			t.Fatalf("a lone busy client got %d of 100", s1)
		}
		c1.cancel()
		// The proxy reconnects at once: its old stream's share still holds (the proxy
		// may enforce it until its TTL), so the new stream gets what is left...
		c2 := openQuota(t, r)
		s2 := share(c2.mustReport("edge", busy).BucketAction[0])
		if s1+s2 > 100 {
			t.Fatalf("shares %d + %d exceed the limit", s1, s2)
		}
		// ...and the whole bucket once the old share's TTL passed.
		clock.Advance(3*time.Second + time.Millisecond)
		if s := share(c2.mustReport("", busy).BucketAction[0]); s < s1 {
			t.Fatalf("after the TTL the reconnected client got %d, want %d as before", s, s1)
		}
	})

	t.Run("decision log", func(t *testing.T) {
		var buf syncBuffer
		r, _ := quotaServerLog(t, QuotaOptions{}, slog.New(slog.NewTextHandler(&buf, nil)))
		c := openQuota(t, r)
		u := []usage{{id: name("a"), allowed: 10}, {id: name("b"), allowed: 10}}
		c.mustReport("edge", u...) // two new shares: two lines
		c.mustReport("", u...)     // the same shares: nothing at info
		if n := strings.Count(buf.String(), "rlqs rebalance"); n != 2 {
			t.Fatalf("%d rebalance lines, want 2:\n%s", n, buf.String())
		}
		if !strings.Contains(buf.String(), "bucket=per-name") || strings.Contains(buf.String(), "name=a") {
			t.Errorf("log %s: want rule names and digests, not bucket id values", buf.String())
		}
	})

	t.Run("metrics", func(t *testing.T) {
		r, _ := quotaServer(t, QuotaOptions{})
		c := openQuota(t, r)
		c.mustReport("edge", usage{id: name("a"), allowed: 7, denied: 2}, usage{id: name("b"), allowed: 1})
		res, err := http.Get(r.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for _, want := range []string{
			"sluice_rlqs_clients 1",
			"sluice_rlqs_buckets 2",
			`sluice_rlqs_reported_requests_total{bucket="per-name",domain="edge",result="allowed"} 8`,
			`sluice_rlqs_reported_requests_total{bucket="per-name",domain="edge",result="denied"} 2`,
			`sluice_rlqs_assigned_rate{bucket="per-name",domain="edge"}`,
			`sluice_rlqs_bucket_actions_total{action="token_bucket"} 2`,
		} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

// TestRLQSTwoInstancesOneRedis: two sluice instances (server.New on stack.Open each) on
// one real Redis serve the same bucket to different clients; at every answer the latest
// shares of all clients sum to at most the limit, and each instance sees the other's
// clients (the bucket is divided, not given whole to each).
func TestRLQSTwoInstancesOneRedis(t *testing.T) {
	srv := redistest.Start(t)
	clock := clocktest.New(t0)
	cfg := quotaCfg(t)
	var rs [2]*running
	for i := range rs {
		st := openStack(t, cfg, stack.Options{RedisURL: srv.URL(), Clock: clock.Now, Deadline: testDeadline})
		s, err := New(Options{Limiter: st.Limiter(), Config: cfg, Quota: QuotaOptions{Store: st.Quota}, Registry: prometheus.NewRegistry(), Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		rs[i] = serve(t, s)
	}
	const clients = 6
	cs := make([]*quotaClient, clients)
	for i := range cs {
		cs[i] = openQuota(t, rs[i%2])
	}
	bucket := map[string]string{"name": "shared"}
	shares := make([]int64, clients)
	for round := range 8 {
		for i, c := range cs {
			domain := ""
			if round == 0 {
				domain = "edge"
			}
			// Client 0 asks 10× what the others do.
			d := uint64(50)
			if i == 0 {
				d = 500
			}
			resp := c.mustReport(domain, usage{id: bucket, allowed: d / 2, denied: d - d/2})
			a := resp.BucketAction[0]
			if kind(a) != "tokens" && kind(a) != "deny" {
				t.Fatalf("round %d client %d: %v", round, i, a)
			}
			shares[i] = share(a)
			var sum int64
			for _, s := range shares {
				sum += s
			}
			if sum > 100 {
				t.Fatalf("round %d client %d: shares %v sum to %d, over the limit 100", round, i, shares, sum)
			}
		}
		clock.Advance(time.Second)
	}
	var sum int64
	for _, s := range shares {
		sum += s
	}
	// Settled: nearly the whole bucket in use, the busy client holding the most.
	if sum < 80 || shares[0] <= shares[1] || shares[1] == 0 {
		t.Fatalf("settled shares %v (sum %d)", shares, sum)
	}
	t.Logf("shares across two instances: %v (sum %d of 100)", shares, sum)
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
