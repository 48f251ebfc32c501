package conformance

import (
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
// above, and by none (one without entries among them).
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
	{"unknown", "1"}, {},
}

// conformanceModel is what pairModel needs to know of conformanceConfig.
var conformanceModel = modelConfig{
	shadow: map[string]bool{"shadow": true},
	quota:  map[string]bool{"quota": true},
	share:  map[string]string{"shared": "grp*"},
}

// TestReferenceConformance sends the same random ShouldRateLimit requests to sluice
// (package server loaded with conformanceConfig, on the in-memory store, on the Redis
// store, and on the Redis store behind failover and the deny cache as sluice serve runs
// it) and to envoyproxy/ratelimit (on a redis-server of its own, loaded with the same
// file), both in the same second, and compares whole answers: overall_code, and per
// descriptor code, current_limit, limit_remaining and duration_until_reset, and the
// response headers, by default (none) and with the reference's
// LIMIT_RESPONSE_HEADERS_ENABLED (sluice's RLSHeaders.Reference).
//
// What each answer must be is pairModel's: the reference's answer as the reference
// computes it, and sluice's with the differences docs/envoy.md lists, and no
// others. A round whose answers straddle a second is compared without its times and sent
// again. The log says how many answers were compared.
//
// It needs the reference's binary: by default it go-installs reference.Version (the Go
// module proxy must be reachable; the binary is kept in the user's cache directory).
func TestReferenceConformance(t *testing.T) {
	bin, err := reference.Install(*referenceFlag, reference.Service)
	if err != nil {
		t.Fatalf("envoyproxy/ratelimit is needed and could not be built: %v", err)
	}
	root := t.TempDir()
	if err := reference.WriteConfig(root, "conf.yaml", []byte(conformanceConfig)); err != nil {
		t.Fatal(err)
	}
	// Two reference processes, each on a redis-server of its own: one with its defaults,
	// one sending its headers.
	type refService struct {
		redis *redistest.Server
		proc  *reference.Process
	}
	refs := map[bool]refService{}
	for _, headers := range []bool{false, true} {
		rs := redistest.Start(t)
		var env []string
		if headers {
			env = append(env, "LIMIT_RESPONSE_HEADERS_ENABLED=true")
		}
		p, err := reference.Start(bin, root, rs.Addr(), env...)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		refs[headers] = refService{rs, p}
	}

	cfgDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfgDir, "conf.yaml"), []byte(conformanceConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgDir)
	if err != nil {
		t.Fatalf("sluice rejects the configuration the reference loads: %v", err)
	}
	runs := []struct {
		name    string
		headers bool
		open    func(t *testing.T) sluice.Limiter
	}{
		{"memory", false, func(t *testing.T) sluice.Limiter {
			m := memory.New()
			t.Cleanup(func() { m.Close() })
			return m
		}},
		{"redis with the reference's headers", true, func(t *testing.T) sluice.Limiter { return openRedisStore(t) }},
		// As sluice serve decides on Redis: a deny cache over failover over the store.
		{"redis behind failover and the deny cache", false, func(t *testing.T) sluice.Limiter {
			return denycache.New(failover.New(openRedisStore(t), failover.WithDeadline(time.Second)))
		}},
	}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			ref := refs[run.headers]
			ref.redis.MustDo("FLUSHALL") // the reference starts afresh too
			l := run.open(t)
			conform(t, l, cfg, ref.proc.GRPCAddr, run.headers)
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

// dialRLS returns a client of the rate limit service at addr, closed when the test ends.
func dialRLS(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// serveRLS serves s's rate limit service on a loopback port until the test ends and
// returns a client of it.
func serveRLS(t *testing.T, s *server.Server) rlsv3.RateLimitServiceClient {
	g := s.NewGRPCServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(g.Stop)
	return dialRLS(t, ln.Addr().String())
}

// conform runs the comparison against sluice's server on store.
func conform(t *testing.T, store sluice.Limiter, cfg *config.Config, refAddr string, headers bool) {
	srv, err := server.New(server.Options{Limiter: store, Config: cfg, RLSHeaders: server.RLSHeaders{Reference: headers}})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{t: t, sl: serveRLS(t, srv), ref: dialRLS(t, refAddr), model: newPairModel(conformanceModel, headers, false)}

	// Minute windows (both services align them to the Unix epoch): the run, about 2 s,
	// must end in the minute it starts in. The reference binary reads its own wall clock,
	// which a test cannot set, so both run on the wall clock, clear of a minute's end.
	clocktest.AwayFromEdge(t, time.Minute, 20*time.Second)
	minute := time.Now().Truncate(time.Minute)

	seed := testSeed()
	rng := rand.New(rand.NewPCG(seed, 7919))
	t.Logf("seed %d", seed)
	for i := 0; i < *conformanceN; i++ {
		p.send(conformanceRequest(rng, i/100))
		if !time.Now().Truncate(time.Minute).Equal(minute) {
			t.Fatalf("a minute boundary passed after %d requests: the run must fit in one minute window (fewer -conformance-requests)", i)
		}
	}
	p.report(*conformanceN / 2)
	if p.denied[0] < p.compared/10 {
		t.Errorf("sluice denied %d of %d requests: too few to say anything", p.denied[0], p.compared)
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
