// Command servicebench measures `sluice serve` as a separate process on loopback, on the
// in-memory store and on Redis, with the load generator (cmd/loadgen) as a third process:
// ShouldRateLimit at 8 and 64 callers, POST /v1/check at 64 callers, ShouldRateLimit
// paced at half of the 64-caller peak, ShouldRateLimit while Redis is frozen with
// SIGSTOP, and a flood of ShouldRateLimit from 1,000 clients all over their limit (on
// Redis with sluice's deny cache and without it). With -reference, the same rows (but
// POST /v1/check) for envoyproxy/ratelimit on the same redis-server, then sluice on Redis
// and the reference alternately at 64 callers, so that sluice's ratio to it comes from
// runs seconds apart. Every row gives the CPU time per request of the service, of
// redis-server and of the load generator (from /proc), and on Redis the decisions each
// call of sluice's script carried (INFO commandstats); each service's half-peak row has
// the floor (cmd/floor, up for the whole run) paced at the same rate beside it, twice in
// a row (the second run is the spread two runs of one service show, against which the
// first comparison is read), and its p99 less the floor's. It ends with the figures issue
// 25's targets name. It prints Markdown tables for bench/README.md.
//
//	cd bench && go run ./cmd/servicebench            # about 4 minutes; with -reference default about 7
//	cd bench && go run ./cmd/servicebench -d 5s      # shorter runs
//	cd bench && go run ./cmd/servicebench -only redis -reference default
//
// It needs redis-server on PATH (apt-get install redis-server) and starts its own on a
// free port; nothing else on the machine is touched.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/bench/internal/reference"
	"github.com/sluicehq/sluice/internal/headroom"
)

// result mirrors cmd/loadgen's JSON output.
type result struct {
	Target     string  `json:"target"`
	Callers    int     `json:"callers"`
	Rate       float64 `json:"rate"`
	Requests   int64   `json:"requests"`
	Total      int64   `json:"total"`
	P99Sched   int64   `json:"p99_sched_us"`
	RPS        float64 `json:"rps"`
	OverLimit  int64   `json:"over_limit"`
	Errors     int64   `json:"errors"`
	P50        int64   `json:"p50_us"`
	P90        int64   `json:"p90_us"`
	P99        int64   `json:"p99_us"`
	P999       int64   `json:"p999_us"`
	Max        int64   `json:"max_us"`
	FirstError string  `json:"first_error"`
	SlowOver   int64   `json:"slow_over"`
	Timeline   []struct {
		StartMs  int64 `json:"start_ms"`
		Requests int64 `json:"requests"`
		Errors   int64 `json:"errors"`
		MaxUS    int64 `json:"max_us"`
	} `json:"timeline"`

	// CPU time per request (µs) of the service, redis-server and the load generator,
	// measured by servicebench from /proc.
	cpuService, cpuRedis, cpuLoadgen float64
	// perCall is the requests per call of sluice's decision script (EVALSHA, from INFO
	// commandstats): how many decisions each call carried, the store's batching. 0 when
	// unknown or not sluice on Redis.
	perCall float64
	// storeShare is the share of decisions the store made, cacheShare the share the deny
	// cache answered from the store's earlier denials; the rest were made by the failure
	// mode (the store missed the deadline or the breaker was open).
	storeShare, cacheShare float64
}

const benchConfig = `# servicebench: one Envoy domain, a generous fixed window per client so that the
# service does full work (a store decision) for every request and answers OK; and one
# request per hour per abuser, for the flood rows, in which every request is over the limit.
domain: bench
descriptors:
  - key: client
    rate_limit:
      unit: second
      requests_per_unit: 1000
  - key: abuser
    rate_limit:
      unit: hour
      requests_per_unit: 1
`

var (
	dur       = flag.Duration("d", 10*time.Second, "how long each measurement runs (after a 2s warm-up)")
	keys      = flag.Int("keys", 100000, "distinct descriptor values")
	deadline  = flag.Duration("deadline", 100*time.Millisecond, "sluice's --deadline for Redis in the throughput runs: long enough that the store decides (nearly) every request, so that they measure the store path, not the failure mode")
	freezeDL  = flag.Duration("freeze-deadline", 5*time.Millisecond, "sluice's --deadline for the run that freezes Redis (the failover package's default)")
	only      = flag.String("only", "", "run only this store: memory or redis")
	prebuilt  = flag.String("sluice", "", "use this sluice binary instead of building ../cmd/sluice")
	sluiceAr  = flag.String("sluice-args", "", "more arguments for every sluice serve this runs, space-separated (\"--redis-min-ttl 10s\")")
	procs     = flag.Int("sluice-procs", 0, "run sluice with GOMAXPROCS set to this (0: Go's default, one per core)")
	refFlag   = flag.String("reference", "", "also measure envoyproxy/ratelimit, the reference implementation, on the same redis-server: a module version to go install (github.com/envoyproxy/ratelimit/src/service_cmd@VERSION; \"default\" for "+reference.Version+"), or the path of a binary built from it; empty: skip it")
	refEnv    = flag.String("reference-env", "", "settings for the reference beyond reference.Start's, comma-separated NAME=value (USE_STATSD=true,DISABLE_STATS=false: its out-of-the-box stats)")
	floorRun  = flag.Bool("floor", true, "also measure cmd/floor, a service that decides nothing (the transport, the load generator and the machine alone), in the common rows and the alternation")
	headroomF = flag.Int64("gc-headroom", headroom.Default, "the heap headroom of sluice and the floor (internal/headroom; sluice's --gc-headroom-bytes, passed only when set here, so that binaries without the flag run): the same pacing for both, so that the floor differs from sluice only in deciding nothing; 0: Go's own pacing")
	redisHz   = flag.Int("redis-hz", 10, "redis-server's hz (10 is Redis's default; 100 runs its periodic work, key expiry among it, in ten times smaller pieces: see bench/README.md)")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "servicebench:", err)
		os.Exit(1)
	}
}

// bench holds what every measurement needs: the binaries, the configuration and the
// redis-server every Redis-backed service shares.
type bench struct {
	sluiceBin, loadgenBin, refBin string
	floorBin                      string
	cfgDir, refRoot               string
	redis                         *exec.Cmd
	redisURL                      string
	redisAddr                     string

	// floor is cmd/floor, up for the whole run (unless -floor=false), so that every
	// service's half-peak row has the floor at the same rate beside it.
	floor *service
	// seen holds each service's rows at 64 callers, closed loop and at half of its peak,
	// by the service's name, for the summary against the targets.
	seen map[string]*measured
	// rounds are the alternated rounds (with -reference).
	rounds []round
}

// measured is what the summary needs of one service.
type measured struct {
	peak, half result
	// floorHalf is the floor paced at this service's half-peak rate, when measured, and
	// floorAgain the same run of the floor repeated at once: how far two runs of one
	// service at one rate differ on this machine, the resolution of the comparisons
	// against the floor.
	floorHalf, floorAgain result
	hasFloorHalf          bool
}

// overFloor is the half-peak p99 less the floor's at the same rate (µs).
func (m *measured) overFloor() int64 { return m.half.P99 - m.floorHalf.P99 }

// atHalf prints the summary's lines of who at half of its peak against the floor paced
// at that rate, if it was: the service CPU, then the p99 with its target.
func (m *measured) atHalf(who, p99Target string) {
	if !m.hasFloorHalf {
		return
	}
	// The transport's CPU per request grows as the rate falls (fewer frames per system
	// call), so the closed-loop line sets sluice at its own rate against the floor at a
	// higher one; this one compares them at one rate.
	fmt.Printf("| %s, service CPU less the floor's, both paced at its half peak (%.0f/s) | %.1f − %.1f = %.1f | – |\n", who,
		m.half.RPS, m.half.cpuService, m.floorHalf.cpuService, m.half.cpuService-m.floorHalf.cpuService)
	fmt.Printf("| %s, p99 at half of its peak less the floor's at that rate | %s − %s = %s | %s |\n", who,
		us(m.half.P99), us(m.floorHalf.P99), signedUS(m.overFloor()), p99Target)
	fmt.Printf("| the floor against itself at that rate, two runs in a row: service CPU, p99 | %.1f − %.1f = %.1f; %s − %s = %s | – |\n",
		m.floorAgain.cpuService, m.floorHalf.cpuService, m.floorAgain.cpuService-m.floorHalf.cpuService,
		us(m.floorAgain.P99), us(m.floorHalf.P99), signedUS(m.floorAgain.P99-m.floorHalf.P99))
}

// round is one round of the alternation: sluice on Redis, the reference, the floor.
type round struct{ sluice, ref, floor result }

// service is one rate limit service process: sluice serve or the reference.
type service struct {
	name               string // the table's store column
	store              string // memory, redis, or refName
	cmd                *exec.Cmd
	httpAddr, grpcAddr string
}

// sluice reports whether s is sluice serve, which reports its decisions in /metrics.
func (s *service) sluice() bool { return s.store == "memory" || s.store == "redis" }

func (s *service) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.cmd.Wait()
}

func run() error {
	dir, err := os.MkdirTemp("", "servicebench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{sluiceBin: filepath.Join(dir, "sluice"), loadgenBin: filepath.Join(dir, "loadgen"),
		floorBin: filepath.Join(dir, "floor"), cfgDir: filepath.Join(dir, "config"), refRoot: filepath.Join(dir, "runtime")}
	// sluice is built in its own module (the repository root), the load generator in
	// this one.
	builds := [][3]string{{b.sluiceBin, "./cmd/sluice", ".."}, {b.loadgenBin, "./cmd/loadgen", "."}, {b.floorBin, "./cmd/floor", "."}}
	if *prebuilt != "" {
		b.sluiceBin, builds = *prebuilt, builds[1:]
	}
	for _, bd := range builds {
		cmd := exec.Command("go", "build", "-o", bd[0], bd[1])
		cmd.Dir = bd[2]
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", bd[1], err, out)
		}
	}
	os.Mkdir(b.cfgDir, 0o755)
	if err := os.WriteFile(filepath.Join(b.cfgDir, "bench.yaml"), []byte(benchConfig), 0o644); err != nil {
		return err
	}
	if *refFlag != "" {
		spec := *refFlag
		if spec == "default" {
			spec = reference.Version
		}
		if b.refBin, err = reference.Install(spec, reference.Service); err != nil {
			return err
		}
		// The same domain file, unchanged.
		if err := reference.WriteConfig(b.refRoot, "bench.yaml", []byte(benchConfig)); err != nil {
			return err
		}
	}
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not found: install it with apt-get install redis-server")
	}
	redisPort := proc.FreePort()
	b.redis = exec.Command(redisBin, "--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--hz", strconv.Itoa(*redisHz))
	if err := b.redis.Start(); err != nil {
		return err
	}
	defer func() { b.redis.Process.Signal(syscall.SIGCONT); b.redis.Process.Kill(); b.redis.Wait() }()
	b.redisAddr = fmt.Sprintf("127.0.0.1:%d", redisPort)
	b.redisURL = "redis://" + b.redisAddr
	if err := proc.WaitTCP(b.redisAddr, 10*time.Second); err != nil {
		return err
	}
	b.seen = map[string]*measured{}

	fmt.Printf("servicebench: %d cores, GOMAXPROCS %d, %s, load average before: %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), loadavg())
	sluiceProcs := "Go's default"
	if *procs > 0 {
		sluiceProcs = strconv.Itoa(*procs)
	}
	fmt.Printf("sluice (GOMAXPROCS %s), redis-server (hz %d) and loadgen (one P) on one machine, loopback; %d distinct descriptors; %v per run after 2s warm-up; Redis deadline %v (%v in the freeze run)\n\n", sluiceProcs, *redisHz, *keys, *dur, *deadline, *freezeDL)
	fmt.Println(tableHead)
	if *floorRun {
		if b.floor, err = b.startFloor(); err != nil {
			return err
		}
		defer b.floor.stop()
		if _, err := b.common(b.floor, true); err != nil {
			return err
		}
	}
	for _, store := range []string{"memory", "redis"} {
		if *only != "" && *only != store {
			continue
		}
		if err := b.storeRows(store); err != nil {
			return err
		}
	}
	if b.refBin != "" && (*only == "" || *only == "redis") {
		if err := b.referenceRows(); err != nil {
			return err
		}
		if err := b.alternate(); err != nil {
			return err
		}
	}
	b.summary()
	fmt.Printf("\nload average after: %s\n", loadavg())
	return nil
}

const tableHead = "| store | API | callers | pacing | requests/s | p50 | p99 | p99 minus the floor's at this rate | p99.9 | max | errors | decided by the store | from the deny cache | service CPU µs/request | redis-server CPU µs/request | decisions per script call | loadgen CPU µs/request |\n" +
	"|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"

// startSluice starts sluice serve on store (memory or redis), with deadline dl for Redis.
func (b *bench) startSluice(store string, dl time.Duration, extra ...string) (*service, error) {
	s := &service{name: store, store: store,
		httpAddr: fmt.Sprintf("127.0.0.1:%d", proc.FreePort()), grpcAddr: fmt.Sprintf("127.0.0.1:%d", proc.FreePort())}
	args := []string{"serve", "--config", b.cfgDir, "--http", s.httpAddr, "--grpc", s.grpcAddr,
		"--log-level", "error", "--log-sampling", "0", "--failure-mode", "open"}
	if store == "redis" {
		args = append(args, "--redis", b.redisURL, "--deadline", dl.String())
	}
	if proc.Given("gc-headroom") {
		args = append(args, "--gc-headroom-bytes", strconv.FormatInt(*headroomF, 10))
	}
	args = append(args, strings.Fields(*sluiceAr)...)
	args = append(args, extra...)
	s.cmd = exec.Command(b.sluiceBin, args...)
	s.cmd.Stderr = os.Stderr
	if *procs > 0 {
		s.cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(*procs))
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	if err := proc.WaitHTTP("http://"+s.httpAddr+"/readyz", 20*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// startReference starts envoyproxy/ratelimit on the shared redis-server, with the
// settings of reference.Start and -reference-env.
func (b *bench) startReference() (*service, error) {
	var env []string
	if *refEnv != "" {
		env = strings.Split(*refEnv, ",")
	}
	p, err := reference.Start(b.refBin, b.refRoot, strings.TrimPrefix(b.redisURL, "redis://"), env...)
	if err != nil {
		return nil, err
	}
	return &service{name: refName, store: refName, cmd: p.Cmd, httpAddr: p.HTTPAddr, grpcAddr: p.GRPCAddr}, nil
}

// startFloor starts cmd/floor, the service that decides nothing.
func (b *bench) startFloor() (*service, error) {
	s := &service{name: floorName, store: "floor", grpcAddr: fmt.Sprintf("127.0.0.1:%d", proc.FreePort())}
	s.cmd = exec.Command(b.floorBin, "-grpc", s.grpcAddr, "-gc-headroom", strconv.FormatInt(*headroomF, 10))
	s.cmd.Stderr = os.Stderr
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	if err := proc.WaitTCP(s.grpcAddr, 10*time.Second); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// load runs the load generator against s and measures the CPU the processes used.
func (b *bench) load(s *service, target string, callers int, rate float64, extra ...string) (result, error) {
	addr := s.grpcAddr
	if target == "http" {
		addr = s.httpAddr
	}
	a := []string{"-target", target, "-addr", addr, "-c", strconv.Itoa(callers), "-d", dur.String(),
		"-keys", strconv.Itoa(*keys), "-json"}
	if rate > 0 {
		a = append(a, "-rate", strconv.FormatFloat(rate, 'f', 0, 64))
	}
	a = append(a, extra...)
	var out bytes.Buffer
	cmd := exec.Command(b.loadgenBin, a...)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	metrics := "http://" + s.httpAddr + "/metrics"
	usesRedis := s.store == "redis" || s.store == refName
	c0 := int64(-1)
	if s.store == "redis" {
		c0 = b.scriptCalls()
	}
	s0, r0 := proc.CPU(s.cmd.Process.Pid), proc.CPU(b.redis.Process.Pid)
	var p0, p1 map[string]float64
	if s.sluice() {
		p0 = decisionsByPath(metrics)
	}
	if err := cmd.Run(); err != nil {
		return result{}, err
	}
	var r result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return r, err
	}
	if s.sluice() {
		p1 = decisionsByPath(metrics)
	}
	var all float64
	for path, v := range p1 {
		all += v - p0[path]
	}
	if all > 0 {
		r.storeShare = (p1["store"] - p0["store"]) / all
		r.cacheShare = (p1["cache"] - p0["cache"]) / all
	}
	if r.Total > 0 {
		n := float64(r.Total)
		r.cpuService = float64(proc.CPU(s.cmd.Process.Pid)-s0) / n
		r.cpuLoadgen = float64((cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Microseconds()) / n
		if usesRedis {
			r.cpuRedis = float64(proc.CPU(b.redis.Process.Pid)-r0) / n
		}
		if c0 >= 0 {
			if c1 := b.scriptCalls(); c1 > c0 {
				r.perCall = n / float64(c1-c0)
			}
		}
	}
	return r, nil
}

// row prints one measurement of s; overFloor, when set, is its p99 less the floor's p99
// at the same rate.
func row(s *service, api, pacing string, r result, overFloor string) {
	shares := "– | –"
	if s.sluice() {
		shares = fmt.Sprintf("%.2f%% | %.2f%%", 100*r.storeShare, 100*r.cacheShare)
	}
	redis := "– | –"
	switch {
	case r.perCall > 0:
		redis = fmt.Sprintf("%.1f | %.1f", r.cpuRedis, r.perCall)
	case s.store == "redis" || s.store == refName:
		redis = fmt.Sprintf("%.1f | –", r.cpuRedis)
	}
	if overFloor == "" {
		overFloor = "–"
	}
	fmt.Printf("| %s | %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %d | %s | %.1f | %s | %.1f |\n", s.name, api, r.Callers, pacing, r.RPS,
		us(r.P50), us(r.P99), overFloor, us(r.P999), us(r.Max), r.Errors, shares, r.cpuService, redis, r.cpuLoadgen)
}

// common measures s at 8 and 64 callers, at half of the 64-caller peak, and (unless
// skipHTTP) POST /v1/check at 64 callers; it returns the peak.
func (b *bench) common(s *service, skipHTTP bool) (float64, error) {
	m := &measured{}
	b.seen[s.name] = m
	var peak64 float64
	for _, c := range []int{8, 64} {
		r, err := b.load(s, "grpc", c, 0)
		if err != nil {
			return 0, err
		}
		row(s, "ShouldRateLimit", "closed loop", r, "")
		if c == 64 {
			peak64, m.peak = r.RPS, r
		}
	}
	half := peak64 / 2
	r, err := b.load(s, "grpc", 64, half)
	if err != nil {
		return 0, err
	}
	m.half = r
	if b.floor == nil || s == b.floor {
		row(s, "ShouldRateLimit", fmt.Sprintf("%.0f/s (half of peak)", half), r, "")
	} else {
		// The floor at the same rate, right after: the latency the transport, the load
		// generator and the machine give at that rate, deciding nothing.
		f, err := b.load(b.floor, "grpc", 64, half)
		if err != nil {
			return 0, err
		}
		// And the floor again: what the comparison above would show if sluice were the
		// floor, the run-to-run spread it must be read against.
		again, err := b.load(b.floor, "grpc", 64, half)
		if err != nil {
			return 0, err
		}
		m.floorHalf, m.floorAgain, m.hasFloorHalf = f, again, true
		row(s, "ShouldRateLimit", fmt.Sprintf("%.0f/s (half of peak)", half), r, signedUS(m.overFloor()))
		row(b.floor, "ShouldRateLimit", fmt.Sprintf("%.0f/s (%s's half of peak)", half, s.name), f, "")
		row(b.floor, "ShouldRateLimit", fmt.Sprintf("%.0f/s (%s's half of peak), again", half, s.name), again, signedUS(again.P99-f.P99))
	}
	if !skipHTTP {
		r, err = b.load(s, "http", 64, 0)
		if err != nil {
			return 0, err
		}
		row(s, "POST /v1/check", "closed loop", r, "")
	}
	return peak64, nil
}

// flood is 64 callers, closed loop, each request from one of 1,000 abusers already over
// their limit of 1 per hour.
func (b *bench) flood(s *service, label string) error {
	r, err := b.load(s, "grpc", 64, 0, "-key", "abuser", "-keys", "1000")
	if err != nil {
		return err
	}
	row(s, "ShouldRateLimit, every request over the limit"+label, "closed loop", r, "")
	return nil
}

// freeze measures s paced at rate while Redis is SIGSTOPped for 3 s in the middle of
// the run, and prints the run's timeline.
func (b *bench) freeze(s *service, rate float64) error {
	freezeAt, freezeFor := 2*time.Second, 3*time.Second
	go func() {
		time.Sleep(freezeAt)
		b.redis.Process.Signal(syscall.SIGSTOP)
		time.Sleep(freezeFor)
		b.redis.Process.Signal(syscall.SIGCONT)
	}()
	r, err := b.load(s, "grpc", 64, rate, "-slow", (*freezeDL + 20*time.Millisecond).String(),
		"-warmup", "0s", "-bucket", "500ms")
	if err != nil {
		return err
	}
	row(s, "ShouldRateLimit, Redis SIGSTOPped 3 s", fmt.Sprintf("%.0f/s", rate), r, "")
	var frozenN, frozenErr, frozenMax int64
	fmt.Printf("\nTimeline of that run (%s; Redis frozen from %v to %v), by send time:\n\n", s.name, freezeAt, freezeAt+freezeFor)
	fmt.Println("| from | requests | errors | slowest |")
	fmt.Println("|---:|---:|---:|---:|")
	for _, t := range r.Timeline {
		from := time.Duration(t.StartMs) * time.Millisecond
		mark := ""
		if from >= freezeAt && from < freezeAt+freezeFor {
			frozenN, frozenErr, frozenMax = frozenN+t.Requests, frozenErr+t.Errors, max(frozenMax, t.MaxUS)
			mark = " (frozen)"
		}
		fmt.Printf("| %v%s | %d | %d | %s |\n", from, mark, t.Requests, t.Errors, us(t.MaxUS))
	}
	fmt.Printf("\n%s: while Redis was frozen, %d answers, %d errors, slowest %s (sluice's deadline %v). Whole run: %d of %d answers over that deadline + 20 ms.\n\n",
		s.name, frozenN, frozenErr, us(frozenMax), *freezeDL, r.SlowOver, r.Requests)
	fmt.Println(tableHead)
	return nil
}

// storeRows measures sluice on store: the common rows, the flood (on Redis with and
// without the deny cache), and on Redis the freeze.
func (b *bench) storeRows(store string) error {
	s, err := b.startSluice(store, *deadline)
	if err != nil {
		return err
	}
	peak64, err := b.common(s, false)
	if err == nil {
		err = b.flood(s, "")
	}
	s.stop()
	if err != nil || store != "redis" {
		return err
	}
	if s, err = b.startSluice(store, *deadline, "--deny-cache-bytes", "0"); err != nil {
		return err
	}
	err = b.flood(s, " (no deny cache)")
	s.stop()
	if err != nil {
		return err
	}
	// The freeze runs with the default deadline.
	if s, err = b.startSluice(store, *freezeDL); err != nil {
		return err
	}
	defer s.stop()
	return b.freeze(s, peak64/2)
}

// referenceRows measures envoyproxy/ratelimit: the common rows but POST /v1/check (its
// JSON API differs), the flood, and the freeze.
func (b *bench) referenceRows() error {
	s, err := b.startReference()
	if err != nil {
		return err
	}
	defer s.stop()
	peak64, err := b.common(s, true)
	if err != nil {
		return err
	}
	if err := b.flood(s, ""); err != nil {
		return err
	}
	return b.freeze(s, peak64/2)
}

// alternate runs sluice on Redis and the reference, both up on the same redis-server (and
// the floor, unless -floor=false), at 64 callers closed loop, alternately three times: the
// VM's speed changes from minute to minute, and a ratio means something only between runs
// this close together. The floor's ratio to the reference is the most any service could
// show in that round.
func (b *bench) alternate() error {
	sl, err := b.startSluice("redis", *deadline)
	if err != nil {
		return err
	}
	defer sl.stop()
	ref, err := b.startReference()
	if err != nil {
		return err
	}
	defer ref.stop()
	fl := b.floor
	fmt.Printf("\nAlternated, ShouldRateLimit at 64 callers, closed loop (CPU µs/request from /proc):\n\n")
	if fl != nil {
		fmt.Println("| round | sluice (Redis) requests/s | p99 | service CPU | redis-server CPU | envoyproxy/ratelimit requests/s | p99 | service CPU | redis-server CPU | ratio | floor requests/s | p99 | service CPU | floor ÷ reference |")
		fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	} else {
		fmt.Println("| round | sluice (Redis) requests/s | p99 | service CPU | redis-server CPU | envoyproxy/ratelimit requests/s | p99 | service CPU | redis-server CPU | ratio |")
		fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	}
	for i := 1; i <= 3; i++ {
		var rd round
		if rd.sluice, err = b.load(sl, "grpc", 64, 0); err != nil {
			return err
		}
		if rd.ref, err = b.load(ref, "grpc", 64, 0); err != nil {
			return err
		}
		rs, rr := rd.sluice, rd.ref
		fmt.Printf("| %d | %.0f | %s | %.1f | %.1f | %.0f | %s | %.1f | %.1f | %.2f× |", i, rs.RPS, us(rs.P99), rs.cpuService, rs.cpuRedis,
			rr.RPS, us(rr.P99), rr.cpuService, rr.cpuRedis, rs.RPS/max(rr.RPS, 1))
		if fl != nil {
			if rd.floor, err = b.load(fl, "grpc", 64, 0); err != nil {
				return err
			}
			rf := rd.floor
			fmt.Printf(" %.0f | %s | %.1f | %.2f× |", rf.RPS, us(rf.P99), rf.cpuService, rf.RPS/max(rr.RPS, 1))
		}
		fmt.Println()
		b.rounds = append(b.rounds, rd)
	}
	return nil
}

// summary prints the figures issue 25's targets (sections 2 and 3) name: CPU per request
// of the service and of redis-server against the floor's and the reference's, from the
// alternated rounds when there are some (runs seconds apart), else from the 64-caller
// rows; and each service's half-peak p99 less the floor's at the same rate.
func (b *bench) summary() {
	fmt.Printf("\nAgainst issue 25's targets (CPU µs/request from /proc; ranges over the measurements named):\n\n")
	fmt.Println("| figure | measured | target |")
	fmt.Println("|---|---|---|")
	floor, hasFloor := b.seen[floorName]
	for _, name := range []string{"memory", "redis"} {
		m, ok := b.seen[name]
		if !ok {
			continue
		}
		if hasFloor {
			fmt.Printf("| sluice on %s, service CPU less the floor's (64 callers, closed loop) | %.1f − %.1f = %.1f | ≤ 5 |\n", name,
				m.peak.cpuService, floor.peak.cpuService, m.peak.cpuService-floor.peak.cpuService)
		}
		m.atHalf("sluice on "+name, "≤ 0.5 ms")
	}
	if m, ok := b.seen[refName]; ok {
		m.atHalf("envoyproxy/ratelimit", "–")
	}
	if len(b.rounds) == 0 {
		return
	}
	span := func(f func(round) float64) string {
		lo, hi := f(b.rounds[0]), f(b.rounds[0])
		for _, r := range b.rounds[1:] {
			lo, hi = min(lo, f(r)), max(hi, f(r))
		}
		if fmt.Sprintf("%.1f", lo) == fmt.Sprintf("%.1f", hi) {
			return fmt.Sprintf("%.1f", lo)
		}
		return fmt.Sprintf("%.1f–%.1f", lo, hi)
	}
	if hasFloor {
		fmt.Printf("| alternated rounds: sluice (Redis) service CPU less the floor's | %s (sluice %s, floor %s) | ≤ 5 |\n",
			span(func(r round) float64 { return r.sluice.cpuService - r.floor.cpuService }),
			span(func(r round) float64 { return r.sluice.cpuService }), span(func(r round) float64 { return r.floor.cpuService }))
	}
	fmt.Printf("| alternated rounds: reference's service CPU ÷ sluice's | %s× (reference %s) | ≥ 3× |\n",
		span(func(r round) float64 { return r.ref.cpuService / max(r.sluice.cpuService, 0.1) }),
		span(func(r round) float64 { return r.ref.cpuService }))
	fmt.Printf("| alternated rounds: sluice's redis-server CPU ÷ the reference's | %s (sluice %s, reference %s) | ≤ 0.5 |\n",
		span(func(r round) float64 { return r.sluice.cpuRedis / max(r.ref.cpuRedis, 0.1) }),
		span(func(r round) float64 { return r.sluice.cpuRedis }), span(func(r round) float64 { return r.ref.cpuRedis }))
}

// refName and floorName are the reference's and the floor's rows' store column.
const (
	refName   = "envoyproxy/ratelimit, redis"
	floorName = "floor (decides nothing)"
)

// signedUS is us(v) with its sign: a latency difference.
func signedUS(v int64) string {
	if v < 0 {
		return "−" + us(-v)
	}
	return "+" + us(v)
}

func us(v int64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2f ms", float64(v)/1000)
	}
	return fmt.Sprintf("%d µs", v)
}

// decisionsByPath sums sluice_decisions_total (the observe decorator's) by path.
func decisionsByPath(url string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get(url)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "sluice_decisions_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `path="`)
		path, _, _ := strings.Cut(rest, `"`)
		f := strings.Fields(line)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		out[path] += v
	}
	return out
}

// scriptCalls returns the EVALSHA and EVAL calls redis-server has executed (INFO
// commandstats; the commands a script runs are counted apart, under their own names), or
// -1 when they cannot be read.
func (b *bench) scriptCalls() int64 {
	c, err := net.DialTimeout("tcp", b.redisAddr, time.Second)
	if err != nil {
		return -1
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "INFO commandstats\r\n"); err != nil {
		return -1
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n') // $<length>
	if err != nil || !strings.HasPrefix(head, "$") {
		return -1
	}
	n, _ := strconv.Atoi(strings.TrimSpace(head[1:]))
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return -1
	}
	var total int64
	for line := range strings.Lines(string(body)) {
		// cmdstat_evalsha:calls=4182,usec=592886,...
		rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls=")
		if !ok {
			rest, ok = strings.CutPrefix(line, "cmdstat_eval:calls=")
		}
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		k, _ := strconv.ParseInt(v, 10, 64)
		total += k
	}
	return total
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
