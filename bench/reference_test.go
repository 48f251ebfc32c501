package bench

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench/internal/reference"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/denycache"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/server"
)

var (
	referenceFlag = flag.String("reference", "", "envoyproxy/ratelimit for TestReferenceConformance: a module version to go install, or a binary built from it (default: reference.Version)")
	conformanceN  = flag.Int("conformance-requests", 3000, "requests TestReferenceConformance sends to each service")
	seedFlag      = flag.Uint64("conformance-seed", 0, "the random seed of the reference tests (0: from the clock; each test logs the one it used)")
)

// conformanceConfig exercises every matching rule of the reference's configuration
// format: a key with and without a value, prefix and full wildcards, nested descriptors
// (with a deeper request than the configuration and a level without a limit), unlimited,
// requests_per_unit 0, shadow_mode, quota_mode, a named rule and a rule replacing it, and
// a wildcard whose values share one counter (share_threshold).
const conformanceConfig = `domain: conf
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: user
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: path
    value: /health
    rate_limit: {unlimited: true}
  - key: path
    value: /blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 10}
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: plan
        rate_limit: {unit: minute, requests_per_unit: 6}
      - key: region
        value: eu
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: app
    rate_limit: {name: app_limit, unit: minute, requests_per_unit: 8}
  - key: app_override
    rate_limit:
      unit: minute
      requests_per_unit: 3
      replaces: [{name: app_limit}]
  - key: any
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 7}
  - key: shared
    value: "grp*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// conformanceDescriptors are the descriptors requests are made of: matched by each rule
// above, and by none.
var conformanceDescriptors = [][]string{
	{"remote_address", "10.0.0.1"}, {"remote_address", "10.0.0.2"},
	{"user", "vip"}, {"user", "u1"}, {"user", "u2"}, {"user", ""}, {"", "x"},
	{"path", "/api/a"}, {"path", "/api/b"}, {"path", "/health"}, {"path", "/blocked"}, {"path", "/other"},
	{"tenant", "t1"}, {"tenant", "t1", "plan", "free"}, {"tenant", "t2", "plan", "paid"},
	{"tenant", "t1", "region", "eu"}, {"tenant", "t1", "region", "us"}, {"tenant", "t2", "plan", "paid", "extra", "x"},
	{"shadow", "s1"}, {"shadow", "s2"}, {"quota", "q1"},
	{"app", "a1"}, {"app", "a2"}, {"app_override", "x"},
	{"any", "v1"}, {"any", "v2"},
	{"shared", "grp1"}, {"shared", "grp2"},
	{"unknown", "1"},
}

// TestReferenceConformance sends the same random ShouldRateLimit requests to sluice
// (package server on the in-memory store, on the Redis store, and on the Redis store
// behind failover and the deny cache as sluice serve runs it, loaded with
// conformanceConfig) and to
// envoyproxy/ratelimit (on a redis-server of its own, loaded with the same file), one
// after the other, and compares the answers field by field: overall_code; per descriptor
// code, current_limit and limit_remaining; duration_until_reset to the second.
//
// What the comparison allows for is what server's package doc says sluice does
// differently, and nothing else:
//
//   - A request over its limit spends nothing in sluice, from any of its descriptors,
//     while the reference counts every hit. So in a denied request limit_remaining and
//     duration_until_reset are not compared (sluice reports the quota left, and 0 for an
//     empty counter's reset), and afterwards the counters of its descriptors may differ:
//     for them only code-free fields (current_limit) are compared from then on. Shadow
//     and quota_mode descriptors likewise, once the reference's remaining reaches 0
//     (their refused hits count there too).
//   - In a request denied before any store call, by a rule with requests_per_unit 0 or
//     by a cost its limit can never allow, the other descriptors are looked at (cost 0):
//     one reports OK while it has quota left, where the reference, having counted the
//     hits, may report OVER_LIMIT. Their codes are not compared in such a request.
//   - A descriptor's limit override is counted apart from the configured rule of the same
//     descriptor; the reference shares the counter. A descriptor with an override makes
//     its counter one that may differ.
//
// It needs the reference's binary: by default it go-installs reference.Version (the Go
// module proxy must be reachable; the binary is kept in the user's cache directory).
func TestReferenceConformance(t *testing.T) {
	bin, err := reference.Install(*referenceFlag, reference.Service)
	if err != nil {
		t.Fatalf("envoyproxy/ratelimit is needed and could not be built: %v", err)
	}
	rs := redistest.Start(t)
	root := t.TempDir()
	if err := reference.WriteConfig(root, "conf.yaml", []byte(conformanceConfig)); err != nil {
		t.Fatal(err)
	}
	refProc, err := reference.Start(bin, root, rs.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer refProc.Stop()

	cfgDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfgDir, "conf.yaml"), []byte(conformanceConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgDir)
	if err != nil {
		t.Fatalf("sluice rejects the configuration the reference loads: %v", err)
	}
	stores := []struct {
		name string
		open func(t *testing.T) sluice.Limiter
	}{
		{"memory", func(t *testing.T) sluice.Limiter {
			m := memory.New()
			t.Cleanup(func() { m.Close() })
			return m
		}},
		{"redis", func(t *testing.T) sluice.Limiter { return openRedisStore(t) }},
		// As sluice serve decides on Redis: a deny cache over failover over the store.
		{"redis behind failover and the deny cache", func(t *testing.T) sluice.Limiter {
			return denycache.New(failover.New(openRedisStore(t), failover.WithDeadline(time.Second)))
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			rs.MustDo("FLUSHALL") // the reference starts afresh too
			l := st.open(t)
			conform(t, l, cfg, refProc.GRPCAddr)
			if c, ok := l.(*denycache.Cache); ok && c.Len() == 0 {
				t.Error("the deny cache remembered no denial: the run did not exercise it")
			}
		})
	}
}

// openRedisStore opens a Redis store on a redis-server of the test's own.
func openRedisStore(t *testing.T) *redisstore.Store {
	r, err := redisstore.Open(redistest.Start(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// conform runs the comparison against sluice's server on store.
func conform(t *testing.T, store sluice.Limiter, cfg *config.Config, refAddr string) {
	srv, err := server.New(server.Options{Limiter: store, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	g := srv.NewGRPCServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	defer g.Stop()

	dial := func(addr string) rlsv3.RateLimitServiceClient {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return rlsv3.NewRateLimitServiceClient(conn)
	}
	sl, ref := dial(ln.Addr().String()), dial(refAddr)

	// Minute windows (both services align them to the Unix epoch): the run, about 2 s,
	// must end in the minute it starts in.
	clocktest.AwayFromEdge(t, time.Minute, 20*time.Second)
	minute := time.Now().Truncate(time.Minute)

	seed := testSeed()
	rng := rand.New(rand.NewPCG(seed, 7919))
	t.Logf("seed %d", seed)
	diverged := map[string]bool{} // counters that may differ, by descriptor and limit
	var compared, deniedSluice, deniedRef, mismatches, counted int
	ctx := context.Background()
	for i := 0; i < *conformanceN; i++ {
		req := conformanceRequest(rng, i/100)
		a, errA := sl.ShouldRateLimit(ctx, req)
		b, errB := ref.ShouldRateLimit(ctx, req)
		if !time.Now().Truncate(time.Minute).Equal(minute) {
			t.Fatalf("a minute boundary passed after %d requests: the run must fit in one minute window (fewer -conformance-requests)", i)
		}
		if (errA != nil) != (errB != nil) {
			t.Errorf("request %d %s: sluice error %v, reference error %v", i, show(req), errA, errB)
			mismatches++
			for _, d := range req.Descriptors {
				diverged[counterOf(req.Domain, d)] = true
			}
			continue
		}
		if errA != nil {
			continue // both refuse it (an empty descriptor, say)
		}
		compared++
		if a.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			deniedSluice++
		}
		if b.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			deniedRef++
		}
		if diffs := compareAnswers(req, a, b, diverged, &counted); len(diffs) > 0 {
			mismatches++
			if mismatches <= 20 {
				t.Errorf("request %d %s:\n  %s\n  sluice:    %s\n  reference: %s", i, show(req), strings.Join(diffs, "\n  "), showResp(a), showResp(b))
			}
		}
	}
	t.Logf("%d requests compared, %d mismatches; denied by sluice %d, by the reference %d; code, limit_remaining and duration_until_reset compared for %d limited descriptors; %d counters diverged",
		compared, mismatches, deniedSluice, deniedRef, counted, len(diverged))
	if compared < *conformanceN/2 || deniedSluice < compared/10 || counted < compared/4 {
		t.Errorf("the run compared %d requests with %d denials, and counts for %d descriptors: too few to say anything", compared, deniedSluice, counted)
	}
}

// testSeed is -conformance-seed, or the clock's.
func testSeed() uint64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	return uint64(time.Now().UnixNano())
}

// conformanceRequest makes a request of 1 to 3 descriptors; one in ten has a hits_addend
// of 2 or 3, one in twenty a descriptor with its own, one in twenty a limit override, and
// one in fifty names a domain that is not configured. Values that a rule matches by key
// alone carry the round, so that every round starts on fresh counters and the counts are
// compared up to a first denial again and again.
func conformanceRequest(rng *rand.Rand, round int) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: "conf"}
	if rng.IntN(50) == 0 {
		req.Domain = "nowhere"
	}
	if rng.IntN(10) == 0 {
		req.HitsAddend = uint32(2 + rng.IntN(2))
	}
	for range 1 + rng.IntN(3) {
		kv := conformanceDescriptors[rng.IntN(len(conformanceDescriptors))]
		d := &ratelimitv3.RateLimitDescriptor{}
		for j := 0; j < len(kv); j += 2 {
			v := kv[j+1]
			switch {
			case kv[j] == "user" && v == "vip", kv[j] == "path", kv[j] == "plan", kv[j] == "region", v == "", kv[j] == "":
			default:
				v = fmt.Sprintf("%s-r%d", v, round)
			}
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[j], Value: v})
		}
		if rng.IntN(20) == 0 {
			d.HitsAddend = wrapperspb.UInt64(uint64(1 + rng.IntN(3)))
		}
		if rng.IntN(20) == 0 {
			d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 4, Unit: typev3.RateLimitUnit_MINUTE}
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// compareAnswers returns how a (sluice) differs from b (the reference) beyond what the
// test's doc allows, and marks the counters that may differ from now on.
func compareAnswers(req *rlsv3.RateLimitRequest, a, b *rlsv3.RateLimitResponse, diverged map[string]bool, counted *int) []string {
	var diffs []string
	if a.OverallCode != b.OverallCode {
		// Allowed only when a counter of the request has diverged.
		any := false
		for _, d := range req.Descriptors {
			if diverged[counterOf(req.Domain, d)] || d.Limit != nil {
				any = true
			}
		}
		if !any {
			diffs = append(diffs, fmt.Sprintf("overall_code %v, reference %v", a.OverallCode, b.OverallCode))
		}
	}
	if len(a.Statuses) != len(b.Statuses) {
		return append(diffs, fmt.Sprintf("%d statuses, reference %d", len(a.Statuses), len(b.Statuses)))
	}
	denied := a.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT || b.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT
	looked := deniedBeforeTheStore(req, b)
	for i, sa := range a.Statuses {
		sb := b.Statuses[i]
		if !proto.Equal(sa.CurrentLimit, sb.CurrentLimit) {
			diffs = append(diffs, fmt.Sprintf("descriptor %d: current_limit %v, reference %v", i, sa.CurrentLimit, sb.CurrentLimit))
			continue
		}
		d := req.Descriptors[i]
		c := counterOf(req.Domain, d)
		shadow := d.Entries[0].Key == "shadow" || d.Entries[0].Key == "quota"
		if d.Limit != nil {
			diverged[c] = true
		}
		if !diverged[c] {
			if sb.CurrentLimit != nil {
				*counted++
			}
			if sa.Code != sb.Code && !(looked && sa.Code == rlsv3.RateLimitResponse_OK) {
				diffs = append(diffs, fmt.Sprintf("descriptor %d: code %v, reference %v", i, sa.Code, sb.Code))
			}
			// A shadow or quota descriptor's hits that take the reference to 0 may be
			// refused hits, which sluice does not spend: it reports the quota left and,
			// on an empty counter, a reset of 0.
			refused := denied || shadow && sb.LimitRemaining == 0
			if !refused && sa.LimitRemaining != sb.LimitRemaining {
				diffs = append(diffs, fmt.Sprintf("descriptor %d: limit_remaining %d, reference %d", i, sa.LimitRemaining, sb.LimitRemaining))
			}
			da, db := sa.DurationUntilReset.AsDuration(), sb.DurationUntilReset.AsDuration()
			// (A quota_mode descriptor over its limit has none; in a refused request
			// sluice only looked at it, and it is not over.)
			if !refused && ((sa.DurationUntilReset == nil) != (sb.DurationUntilReset == nil) || da-db > time.Second || db-da > time.Second) {
				diffs = append(diffs, fmt.Sprintf("descriptor %d: duration_until_reset %v, reference %v", i, sa.DurationUntilReset, sb.DurationUntilReset))
			}
		}
		if shadow && sb.LimitRemaining == 0 {
			diverged[c] = true
		}
	}
	// A denied request leaves every counter it names possibly different.
	if denied {
		for _, d := range req.Descriptors {
			diverged[counterOf(req.Domain, d)] = true
		}
	}
	return diffs
}

// deniedBeforeTheStore reports whether sluice denies req without asking its store: one of
// its descriptors matches a rule with requests_per_unit 0, or the hits of a descriptor's
// namings add up to more than its limit (b, the reference's answer, says which limits
// apply).
func deniedBeforeTheStore(req *rlsv3.RateLimitRequest, b *rlsv3.RateLimitResponse) bool {
	sum := map[string]uint64{}
	for i, d := range req.Descriptors {
		l := b.Statuses[i].GetCurrentLimit()
		if l == nil {
			continue
		}
		if l.RequestsPerUnit == 0 {
			return true
		}
		hits := uint64(1)
		if req.HitsAddend != 0 {
			hits = uint64(req.HitsAddend)
		}
		if d.HitsAddend != nil {
			hits = d.HitsAddend.Value
		}
		c := counterOf(req.Domain, d)
		if sum[c] += hits; sum[c] > uint64(l.RequestsPerUnit) {
			return true
		}
	}
	return false
}

// counterOf names the counter a descriptor is decided on in the reference: its domain
// and entries (a configured rule and an override share it there), with the pattern in
// place of a value that conformanceConfig's share_threshold wildcard matches.
func counterOf(domain string, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.Entries {
		v := e.Value
		if e.Key == "shared" && strings.HasPrefix(v, "grp") && d.Limit == nil {
			v = "grp*"
		}
		fmt.Fprintf(&b, "|%s=%s", e.Key, v)
	}
	return b.String()
}

func show(req *rlsv3.RateLimitRequest) string {
	var parts []string
	for _, d := range req.Descriptors {
		var e []string
		for _, x := range d.Entries {
			e = append(e, x.Key+"="+x.Value)
		}
		s := "[" + strings.Join(e, ",")
		if d.HitsAddend != nil {
			s += fmt.Sprintf(" hits=%d", d.HitsAddend.Value)
		}
		if d.Limit != nil {
			s += fmt.Sprintf(" override=%d/%v", d.Limit.RequestsPerUnit, d.Limit.Unit)
		}
		parts = append(parts, s+"]")
	}
	return fmt.Sprintf("domain=%s hits=%d %s", req.Domain, req.HitsAddend, strings.Join(parts, " "))
}

func showResp(r *rlsv3.RateLimitResponse) string {
	var parts []string
	for _, s := range r.Statuses {
		p := s.Code.String()
		if s.CurrentLimit != nil {
			p += fmt.Sprintf(" %s %d/%v rem=%d reset=%v", s.CurrentLimit.Name, s.CurrentLimit.RequestsPerUnit, s.CurrentLimit.Unit, s.LimitRemaining, s.DurationUntilReset.AsDuration())
		} else if s.LimitRemaining != 0 {
			p += fmt.Sprintf(" rem=%d", s.LimitRemaining)
		}
		parts = append(parts, p)
	}
	return r.OverallCode.String() + " {" + strings.Join(parts, "; ") + "}"
}
