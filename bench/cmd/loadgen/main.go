// Command loadgen drives a rate limit service with Envoy's rate limit protocol (gRPC,
// go-control-plane's generated stubs) or sluice's JSON API, and reports requests/s and
// latency percentiles. It is a closed-loop generator: -c callers each send a request,
// wait for the answer and send the next. With -rate, the callers are paced to that
// aggregate rate instead, and latency is measured from each request's scheduled start
// (so a stalled server is charged for the requests it delayed, not only the ones it
// answered).
//
//	loadgen -target grpc -addr 127.0.0.1:8081 -c 64 -d 10s
//	loadgen -target http -addr 127.0.0.1:8080 -c 64 -d 10s
//	loadgen -target grpc -addr 127.0.0.1:8081 -c 64 -rate 15000 -d 10s
//
// Each request names a random descriptor out of -keys distinct values (domain -domain,
// entry -key=<prefix><n>), -descriptors per request. Over gRPC the callers share -conns
// connections, each announcing Envoy's fixed 256 MiB flow-control windows (-window), so
// that, like Envoy, the generator sends no bandwidth-delay PINGs. It runs on one P
// (-procs) unless told otherwise, to leave the server as much of the machine as it can.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Result is what one run measured. Latencies are in microseconds.
type Result struct {
	Target    string  `json:"target"`
	Callers   int     `json:"callers"`
	Rate      float64 `json:"rate,omitempty"` // the paced rate asked for; 0 for closed loop
	Seconds   float64 `json:"seconds"`
	Requests  int64   `json:"requests"` // measured (after the warm-up)
	Total     int64   `json:"total"`    // sent, warm-up included
	RPS       float64 `json:"rps"`
	OverLimit int64   `json:"over_limit"`
	Errors    int64   `json:"errors"`
	P50       int64   `json:"p50_us"`
	P90       int64   `json:"p90_us"`
	P99       int64   `json:"p99_us"`
	P999      int64   `json:"p999_us"`
	Max       int64   `json:"max_us"`
	P99Sched  int64   `json:"p99_sched_us,omitempty"` // with -rate: from the scheduled start
	// Timeline has one entry per -bucket of the measured time, by send time.
	Timeline    []Bucket `json:"timeline,omitempty"`
	FirstError  string   `json:"first_error,omitempty"`
	SlowOver    int64    `json:"slow_over,omitempty"` // requests slower than -slow
	SlowBoundUS int64    `json:"slow_bound_us,omitempty"`
}

// Bucket is what the requests sent in one slice of time got.
type Bucket struct {
	StartMs  int64 `json:"start_ms"` // since the measurement began
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	MaxUS    int64 `json:"max_us"`
}

// envoyWindow is Envoy's default HTTP/2 flow-control window for a stream and for a
// connection (256 MiB, both fixed).
const envoyWindow = 256 << 20

func main() {
	var (
		target      = flag.String("target", "grpc", "grpc (ShouldRateLimit) or http (POST /v1/check)")
		addr        = flag.String("addr", "127.0.0.1:8081", "the server's address")
		callers     = flag.Int("c", 64, "concurrent callers")
		conns       = flag.Int("conns", 4, "gRPC connections the callers share")
		window      = flag.Int("window", envoyWindow, "gRPC: the HTTP/2 stream and connection flow-control windows the generator announces, in bytes; the default is Envoy's (initial_stream_window_size and initial_connection_window_size), fixed; 0: grpc-go's, sized by bandwidth-delay PINGs, which Envoy does not send")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the generator to this file")
		procs       = flag.Int("procs", 1, "GOMAXPROCS of the generator (0: Go's default, one per core); ignored when $GOMAXPROCS is set")
		duration    = flag.Duration("d", 10*time.Second, "how long to measure")
		warmup      = flag.Duration("warmup", 2*time.Second, "how long to send before measuring")
		rate        = flag.Float64("rate", 0, "pace the callers to this many requests/s in total (0: closed loop, as fast as answers come)")
		domain      = flag.String("domain", "bench", "the rate limit domain")
		key         = flag.String("key", "client", "the descriptor entry's key")
		prefix      = flag.String("prefix", "c", "prefix of the descriptor values")
		keys        = flag.Int("keys", 100000, "distinct descriptor values")
		descriptors = flag.Int("descriptors", 1, "descriptors per request")
		timeout     = flag.Duration("timeout", 5*time.Second, "per-request timeout")
		slow        = flag.Duration("slow", 0, "count the requests slower than this (0: off)")
		asJSON      = flag.Bool("json", false, "print the result as JSON")
		bucket      = flag.Duration("bucket", 0, "with -json, report requests, errors and the slowest answer per slice of this length (0: off)")
	)
	flag.Parse()
	if *callers < 1 || *keys < 1 || *descriptors < 1 || *conns < 1 {
		fmt.Fprintln(os.Stderr, "loadgen: -c, -keys, -descriptors and -conns must be positive")
		os.Exit(2)
	}
	var send func(ctx context.Context, caller int, rng *rand.Rand) (over bool, err error)
	switch *target {
	case "grpc":
		clients := make([]rlsv3.RateLimitServiceClient, *conns)
		for i := range clients {
			opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
			if *window > 0 {
				opts = append(opts, grpc.WithInitialWindowSize(int32(*window)), grpc.WithInitialConnWindowSize(int32(*window)))
			}
			conn, err := grpc.NewClient(*addr, opts...)
			if err != nil {
				fmt.Fprintln(os.Stderr, "loadgen:", err)
				os.Exit(1)
			}
			defer conn.Close()
			clients[i] = rlsv3.NewRateLimitServiceClient(conn)
		}
		// The descriptor values, formatted once; each caller reuses one request (gRPC
		// has marshalled it when Invoke returns), so that building requests costs the
		// generator next to nothing.
		values := make([]string, *keys)
		for i := range values {
			values[i] = *prefix + strconv.Itoa(i)
		}
		reqs := make([]*rlsv3.RateLimitRequest, *callers)
		for c := range reqs {
			reqs[c] = &rlsv3.RateLimitRequest{Domain: *domain, Descriptors: make([]*ratelimitv3.RateLimitDescriptor, *descriptors)}
			for i := range reqs[c].Descriptors {
				reqs[c].Descriptors[i] = &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: *key}}}
			}
		}
		send = func(ctx context.Context, caller int, rng *rand.Rand) (bool, error) {
			req := reqs[caller]
			for _, d := range req.Descriptors {
				d.Entries[0].Value = values[rng.IntN(len(values))]
			}
			resp, err := clients[caller%len(clients)].ShouldRateLimit(ctx, req)
			if err != nil {
				return false, err
			}
			return resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, nil
		}
	case "http":
		client := &http.Client{Transport: &http.Transport{MaxIdleConns: *callers * 2, MaxIdleConnsPerHost: *callers * 2}}
		url := "http://" + *addr + "/v1/check"
		send = func(ctx context.Context, _ int, rng *rand.Rand) (bool, error) {
			var b bytes.Buffer
			b.WriteString(`{"domain":`)
			json.NewEncoder(&b).Encode(*domain)
			b.WriteString(`,"descriptors":[`)
			for i := range *descriptors {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"entries":[{"key":%q,"value":"%s%d"}]}`, *key, *prefix, rng.IntN(*keys))
			}
			b.WriteString(`]}`)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, &b)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return false, err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case 200:
				return false, nil
			case 429:
				return true, nil
			}
			return false, fmt.Errorf("HTTP %d", resp.StatusCode)
		}
	default:
		fmt.Fprintln(os.Stderr, "loadgen: -target must be grpc or http")
		os.Exit(2)
	}

	if *procs > 0 && os.Getenv("GOMAXPROCS") == "" {
		// The generator shares the machine with the server (and Redis). On one P its
		// goroutines hand off to each other on one thread; on two, every hand-off may
		// wake the other thread (a futex call) and idle threads spin looking for work:
		// about a sixth more CPU per request on two cores, taken from the server.
		runtime.GOMAXPROCS(*procs)
	}
	if os.Getenv("GOGC") == "" {
		// The generator's live heap is a few MB (the latencies, which hold no pointers):
		// collect less often, so that it takes less of the CPU it shares with the server.
		debug.SetGCPercent(800)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
			os.Exit(1)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	res := runLoad(send, *callers, *rate, *warmup, *duration, *timeout, *slow, *bucket)
	res.Target = *target
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(res)
		return
	}
	fmt.Printf("%s c=%d rate=%.0f: %.0f req/s, p50 %dµs p90 %dµs p99 %dµs p99.9 %dµs max %dµs, over_limit %d, errors %d",
		res.Target, res.Callers, res.Rate, res.RPS, res.P50, res.P90, res.P99, res.P999, res.Max, res.OverLimit, res.Errors)
	if res.P99Sched > 0 {
		fmt.Printf(", p99 from schedule %dµs", res.P99Sched)
	}
	if res.SlowBoundUS > 0 {
		fmt.Printf(", slower than %dµs: %d", res.SlowBoundUS, res.SlowOver)
	}
	if res.FirstError != "" {
		fmt.Printf(" (first error: %s)", res.FirstError)
	}
	fmt.Println()
}

// runLoad runs the callers for warmup+duration and measures the last duration.
func runLoad(send func(context.Context, int, *rand.Rand) (bool, error), callers int, rate float64, warmup, duration, timeout, slow, bucket time.Duration) Result {
	start := time.Now()
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)

	// With a rate, request i of the whole run is scheduled at start + i/rate; callers
	// take the next slot in turn.
	var slot atomic.Int64
	interval := time.Duration(0)
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}

	type shard struct {
		lat, sched []int64
		over, errs int64
		total      int64
		buckets    []Bucket
		slowN      int64
		firstErr   error
		_          [64]byte
	}
	shards := make([]shard, callers)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			sh := &shards[c]
			rng := rand.New(rand.NewPCG(uint64(c)+1, uint64(start.UnixNano())))
			for {
				var sched time.Time
				if interval > 0 {
					sched = start.Add(time.Duration(slot.Add(1)-1) * interval)
					if d := time.Until(sched); d > 0 {
						time.Sleep(d)
					}
				} else {
					sched = time.Now()
				}
				if !sched.Before(end) {
					return
				}
				sent := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				over, err := send(ctx, c, rng)
				cancel()
				done := time.Now()
				sh.total++
				if sched.Before(measureFrom) {
					continue
				}
				lat := done.Sub(sent)
				sh.lat = append(sh.lat, lat.Microseconds())
				if interval > 0 {
					sh.sched = append(sh.sched, done.Sub(sched).Microseconds())
				}
				if bucket > 0 {
					b := int(sent.Sub(measureFrom) / bucket)
					for len(sh.buckets) <= b {
						sh.buckets = append(sh.buckets, Bucket{StartMs: (time.Duration(len(sh.buckets)) * bucket).Milliseconds()})
					}
					sh.buckets[b].Requests++
					sh.buckets[b].MaxUS = max(sh.buckets[b].MaxUS, lat.Microseconds())
					if err != nil {
						sh.buckets[b].Errors++
					}
				}
				if slow > 0 && lat > slow {
					sh.slowN++
				}
				switch {
				case err != nil:
					sh.errs++
					if sh.firstErr == nil {
						sh.firstErr = err
					}
				case over:
					sh.over++
				}
			}
		})
	}
	wg.Wait()

	var all, sched []int64
	res := Result{Callers: callers, Rate: rate, Seconds: duration.Seconds(), SlowBoundUS: slow.Microseconds()}
	for i := range shards {
		sh := &shards[i]
		all = append(all, sh.lat...)
		sched = append(sched, sh.sched...)
		res.OverLimit += sh.over
		res.Errors += sh.errs
		res.SlowOver += sh.slowN
		res.Total += sh.total
		for j, b := range sh.buckets {
			for len(res.Timeline) <= j {
				res.Timeline = append(res.Timeline, Bucket{StartMs: (time.Duration(len(res.Timeline)) * bucket).Milliseconds()})
			}
			t := &res.Timeline[j]
			t.Requests += b.Requests
			t.Errors += b.Errors
			t.MaxUS = max(t.MaxUS, b.MaxUS)
		}
		if res.FirstError == "" && sh.firstErr != nil {
			res.FirstError = sh.firstErr.Error()
		}
	}
	slices.Sort(all)
	res.Requests = int64(len(all))
	res.RPS = float64(len(all)) / duration.Seconds()
	pct := func(p float64) int64 {
		if len(all) == 0 {
			return 0
		}
		i := int(p * float64(len(all)-1))
		return all[i]
	}
	res.P50, res.P90, res.P99, res.P999 = pct(0.50), pct(0.90), pct(0.99), pct(0.999)
	if len(all) > 0 {
		res.Max = all[len(all)-1]
	}
	if len(sched) > 0 {
		slices.Sort(sched)
		res.P99Sched = sched[int(0.99*float64(len(sched)-1))]
	}
	return res
}
