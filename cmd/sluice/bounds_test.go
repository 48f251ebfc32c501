package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/denycache"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/stack"
)

// chartValues are the shipped chart's values that bound a replica's memory.
type chartValues struct {
	GoMemLimit string `yaml:"goMemLimit"`
	Resources  struct {
		Limits struct {
			Memory string `yaml:"memory"`
		} `yaml:"limits"`
	} `yaml:"resources"`
	// Bounds are the bounds of what clients can grow, by the environment variable the
	// chart sets (sluice serve's default where the chart leaves it empty).
	Bounds map[string]int64 `yaml:"-"`
}

// chartBounds are the chart's bounds values: their environment variables and sluice
// serve's defaults.
var chartBounds = []struct {
	value, env string
	def        int64
}{
	{"maxKeys", "SLUICE_MAX_KEYS", stack.DefaultMaxKeys},
	{"denyCacheBytes", "SLUICE_DENY_CACHE_BYTES", denycache.DefaultMaxBytes},
	{"maxReservations", "SLUICE_MAX_RESERVATIONS", stack.DefaultMaxReservations},
	{"rlqsMaxStreams", "SLUICE_RLQS_MAX_STREAMS", server.DefaultQuotaMaxStreams},
	{"rlqsMaxBucketsPerStream", "SLUICE_RLQS_MAX_BUCKETS_PER_STREAM", server.DefaultQuotaMaxBucketsPerStream},
	{"maxConnections", "SLUICE_MAX_CONNECTIONS", server.DefaultMaxConnections},
}

// readChart reads deploy/helm/sluice/values.yaml, and the memory limit in bytes.
func readChart(t *testing.T) (chartValues, int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "helm", "sluice", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v chartValues
	var bounds struct {
		Bounds map[string]string `yaml:"bounds"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &bounds); err != nil {
		t.Fatal(err)
	}
	v.Bounds = map[string]int64{}
	for _, cb := range chartBounds {
		s, ok := bounds.Bounds[cb.value]
		if !ok {
			t.Fatalf("the chart has no bounds.%s", cb.value)
		}
		v.Bounds[cb.env] = cb.def
		if s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				t.Fatalf("bounds.%s: %v", cb.value, err)
			}
			v.Bounds[cb.env] = n
		}
	}
	limit, err := quantityBytes(v.Resources.Limits.Memory)
	if err != nil || limit <= 0 || v.GoMemLimit == "" {
		t.Fatalf("the chart's values: memory limit %q (%v), goMemLimit %q, bounds %+v", v.Resources.Limits.Memory, err, v.GoMemLimit, v.Bounds)
	}
	return v, limit
}

// quantityBytes parses a Kubernetes memory quantity in binary units (256Mi).
func quantityBytes(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.n
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n * mult, err
}

// procMemory returns a process's resident set size now and its peak (VmRSS, VmHWM).
func procMemory(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading the process's memory (Linux's /proc is needed): %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		for name, p := range map[string]*int64{"VmRSS:": &rss, "VmHWM:": &peak} {
			if rest, ok := strings.CutPrefix(l, name); ok {
				kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				if err != nil {
					t.Fatalf("%s %q: %v", name, rest, err)
				}
				*p = kb << 10
			}
		}
	}
	return rss, peak
}

// TestBinaryRLQSBoundFitsChart: the built binary, run as the shipped chart runs it (its
// GOMEMLIMIT, its bounds as environment variables), with its RLQS streams and buckets
// filled to those bounds on the in-memory quota store, stays under the chart's memory
// limit. The bounds hold: one stream more is refused, one bucket more abandoned. With
// 10,000 × 1,000 and no flag, 700 × 1,000 reached 319–326 MiB against 256Mi (issue 39,
// item 5).
func TestBinaryRLQSBoundFitsChart(t *testing.T) {
	chart, limit := readChart(t)
	streams, buckets := int(chart.Bounds["SLUICE_RLQS_MAX_STREAMS"]), int(chart.Bounds["SLUICE_RLQS_MAX_BUCKETS_PER_STREAM"])
	maxKeys := chart.Bounds["SLUICE_MAX_KEYS"]
	bin := sluiceBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(cfg, []byte(`domain: mesh
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
quota_buckets:
  - {name: per-route, bucket_id: {route: "*"}, rate: 100, period: 1s}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOMEMLIMIT", chart.GoMemLimit)
	for env, n := range chart.Bounds {
		t.Setenv(env, strconv.FormatInt(n, 10))
	}
	pprofAddr := freeAddr(t)
	p := startServe(t, bin, "--config", cfg, "--pprof", pprofAddr)
	grpcAddr := ""
	poll.Until(t, 20*time.Second, "the gRPC address logged", func() bool {
		if m := p.logged("serving gRPC"); m != nil {
			grpcAddr, _ = m["addr"].(string)
		}
		return grpcAddr != ""
	})
	_, base := procMemory(t, p.cmd.Process.Pid)
	baseLive := liveHeap(t, p.base, pprofAddr)

	// The memory store filled to its bound first: distinct keys of an hourly limit, 256
	// descriptors a call.
	rls := rlsClient(t, grpcAddr)
	var fill sync.WaitGroup
	next := make(chan int)
	fillErr := make(chan error, 1)
	for range 4 {
		fill.Go(func() {
			for call := range next {
				req := &rlsv3.RateLimitRequest{Domain: "mesh"}
				for i := range 256 {
					req.Descriptors = append(req.Descriptors, descriptor("k", fmt.Sprint("key-", call*256+i)))
				}
				if _, err := rls.ShouldRateLimit(context.Background(), req); err != nil {
					select {
					case fillErr <- err:
					default:
					}
				}
			}
		})
	}
	for call := range int(maxKeys+255) / 256 {
		next <- call
	}
	close(next)
	fill.Wait()
	select {
	case err := <-fillErr:
		t.Fatal(err)
	default:
	}
	if n := metricValue(t, p.base, `sluice_memory_keys{store="memory"}`); n != float64(maxKeys) {
		t.Fatalf("%v keys held after filling, want the bound %d", n, maxKeys)
	}
	keysLive := liveHeap(t, p.base, pprofAddr)

	// One connection per 100 streams, as a fleet of proxies would bring.
	var conns []*grpc.ClientConn
	for range (streams + 99) / 100 {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conns = append(conns, conn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	report := func(s int, from, n int) *rlqsv3.RateLimitQuotaUsageReports {
		r := &rlqsv3.RateLimitQuotaUsageReports{Domain: "mesh"}
		for b := from; b < from+n; b++ {
			r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
				BucketId:    &rlqsv3.BucketId{Bucket: map[string]string{"route": fmt.Sprintf("/stream-%d/bucket-%d", s, b)}},
				TimeElapsed: durationpb.New(time.Second), NumRequestsAllowed: 40,
			})
		}
		return r
	}
	open := make([]rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, streams)
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	sem := make(chan struct{}, 16)
	// Two rounds: every stream reports its buckets, then reports them again.
	for round := range 2 {
		for s := range streams {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				if open[s] == nil {
					st, err := rlqsv3.NewRateLimitQuotaServiceClient(conns[s/100]).StreamRateLimitQuotas(ctx)
					if err != nil {
						errs <- err
						return
					}
					open[s] = st
				}
				if err := open[s].Send(report(s, 0, buckets)); err != nil {
					errs <- fmt.Errorf("stream %d, round %d: %w", s, round, err)
					return
				}
				resp, err := open[s].Recv()
				if err != nil {
					errs <- fmt.Errorf("stream %d, round %d: %w", s, round, err)
					return
				}
				for _, a := range resp.GetBucketAction() {
					if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil {
						errs <- fmt.Errorf("stream %d, round %d: a bucket within the bounds answered %v", s, round, a)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	bucketsLive := liveHeap(t, p.base, pprofAddr)

	// Then every connection the listeners allow, held idle: gRPC connections past their
	// preface (a client's that made one call), HTTP ones before their first request.
	maxConns := int(chart.Bounds["SLUICE_MAX_CONNECTIONS"])
	for range maxConns - len(conns) - 2 { // the fill's and the extra stream's connections
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "mesh",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "key-0")}}); err != nil {
			t.Fatal(err)
		}
	}
	httpAddr := strings.TrimPrefix(p.base, "http://")
	for range maxConns - 8 { // room for this test's /metrics and pprof requests
		c, err := net.Dial("tcp", httpAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	rss, peak := procMemory(t, p.cmd.Process.Pid)
	live := liveHeap(t, p.base, pprofAddr)
	t.Logf("with %d gRPC and %d HTTP connections too: %.1f MiB live (%.0f bytes per connection), RSS %.1f MiB, peak %.1f MiB; gRPC connections open %v, refused %v",
		maxConns-len(conns)-2, maxConns-8, mib(live), float64(live-bucketsLive)/float64(2*maxConns-len(conns)-10), mib(rss), mib(peak),
		metricValue(t, p.base, `sluice_server_connections{listener="grpc"}`), metricValue(t, p.base, "sluice_server_connections_refused_total"))
	held := metricValue(t, p.base, "sluice_rlqs_buckets")
	t.Logf("GOMEMLIMIT %s, memory limit %.0f MiB; %d keys and %d RLQS streams × %d buckets (%v held): live heap %.1f MiB at start (RSS %.1f MiB), %.1f with the keys (%.0f bytes per key), %.1f with the buckets too (%.0f bytes per bucket)",
		chart.GoMemLimit, mib(limit), maxKeys, streams, buckets, held, mib(baseLive), mib(base),
		mib(keysLive), float64(keysLive-baseLive)/float64(maxKeys), mib(bucketsLive), float64(bucketsLive-keysLive)/float64(streams*buckets))
	if held != float64(streams*buckets) {
		t.Errorf("sluice_rlqs_buckets %v, want %d", held, streams*buckets)
	}
	if peak >= limit {
		t.Errorf("peak RSS %.1f MiB at the RLQS bound, over the chart's memory limit %.0f MiB", mib(peak), mib(limit))
	}

	// The bounds hold: a stream more is refused, a bucket more on a full stream abandoned.
	extra, err := rlqsv3.NewRateLimitQuotaServiceClient(conns[0]).StreamRateLimitQuotas(ctx)
	if err == nil {
		// A refused stream's Send may see only its end (io.EOF); Recv has the status.
		if err = extra.Send(report(streams, 0, 1)); err == nil || errors.Is(err, io.EOF) {
			_, err = extra.Recv()
		}
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("stream %d of %d: %v, want RESOURCE_EXHAUSTED", streams+1, streams, err)
	}
	if err := open[0].Send(report(0, buckets, 1)); err != nil {
		t.Fatal(err)
	}
	resp, err := open[0].Recv()
	if err != nil {
		t.Fatal(err)
	}
	if a := resp.GetBucketAction(); len(a) != 1 || a[0].GetAbandonAction() == nil {
		t.Errorf("bucket %d of a stream bounded at %d: %v, want abandon_action", buckets+1, buckets, a)
	}
}

// liveHeap collects the garbage of the process serving base (a heap profile with gc=1 on
// its pprof listener) and returns its heap in use then.
func liveHeap(t *testing.T, base, pprofAddr string) int64 {
	t.Helper()
	httpGet(t, "http://"+pprofAddr+"/debug/pprof/heap?gc=1")
	return int64(metricValue(t, base, "go_memstats_heap_alloc_bytes"))
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
