// Command soak runs `sluice serve` on a real Redis under mixed load with injected faults
// for -duration, and fails (exit 1) when one of its bounds is broken. It prints a summary
// table. `make soak` runs it (SOAK_DURATION, default 10m); it is not part of make test.
//
// Setup: redis-server on a free loopback port, behind internal/faultproxy; sluice serve
// (built from this repository) on it, fail closed, deadline -deadline, with a watched
// configuration directory. Load, paced, over the JSON API:
//
//   - exact: a few sampled keys under a sliding log of 20 per 10 s, every admission
//     logged with the time its request was sent;
//   - spray: distinct keys under a GCRA policy (keys that come and go);
//   - multi: requests of two limits (a per-tenant and a per-user policy).
//
// Faults, in turn, one every -fault-every: latency over the deadline, every connection
// cut, a blackhole, redis-server stopped (SIGSTOP) then continued, and a configuration
// reload (a file rewritten, then SIGHUP).
//
// Bounds asserted:
//
//   - after warm-up (-warmup), sluice's RSS stays below 2× its value at the end of warm-up
//     plus 32 MiB plus the collector's heap headroom (internal/headroom's default, which
//     sluice serve runs with: at this load the heap grows by that much between
//     collections), and its goroutines below that value plus 200;
//   - every answer comes within the deadline plus -slack;
//   - on the exact keys, no interval of 10 s less twice the slowest answer holds more than
//     20 admissions (fail closed: a failure never admits, so the log must fit the limit);
//   - no decision is lost: every request gets 200, 429 or (fail closed) 503 with a JSON
//     body, across reloads too.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/faultproxy"
	"github.com/sluicehq/sluice/internal/headroom"
)

var (
	duration   = flag.Duration("duration", 10*time.Minute, "how long to soak")
	warmup     = flag.Duration("warmup", 30*time.Second, "load before the resource bounds are measured from")
	deadline   = flag.Duration("deadline", 20*time.Millisecond, "sluice's Redis deadline")
	slack      = flag.Duration("slack", 500*time.Millisecond, "how much longer than the deadline an answer may take (scheduling on a loaded machine)")
	faultEvery = flag.Duration("fault-every", 15*time.Second, "time between faults")
	rate       = flag.Int("rate", 300, "requests per second, all kinds together")
)

const (
	exactRate   = 20
	exactPeriod = 10 * time.Second
	exactKeys   = 8
)

func configFile(gen int) string {
	return fmt.Sprintf(`# generation %d
policies:
  - {name: exact, key: user, algorithm: sliding_log, rate: %d, period: 10s}
  - {name: spray, key: user, algorithm: gcra, rate: 5, period: second, burst: 10}
  - {name: tenant, key: user, algorithm: fixed_window, rate: 200, period: second}
  - {name: gen-%d, key: user, algorithm: gcra, rate: 1, period: second}
`, gen, exactRate, gen)
}

type stats struct {
	mu        sync.Mutex
	latencies []time.Duration
	codes     map[int]int64
	lost      int64 // transport errors, unexpected statuses, bodies that are not JSON
	lostWhy   string
	admitted  [exactKeys][]time.Time // send times of admitted exact requests
}

func (s *stats) record(lat time.Duration, code int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latencies = append(s.latencies, lat)
	if err != nil {
		s.lost++
		if s.lostWhy == "" {
			s.lostWhy = err.Error()
		}
		return
	}
	s.codes[code]++
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "soak")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %v\n%s", err, out)
	}
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not found: install it with apt-get install redis-server")
	}
	redisPort := proc.FreePort()
	redis := exec.Command(redisBin, "--port", strconv.Itoa(redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := redis.Start(); err != nil {
		return err
	}
	defer func() { redis.Process.Signal(syscall.SIGCONT); redis.Process.Kill(); redis.Wait() }()
	redisAddr := fmt.Sprintf("127.0.0.1:%d", redisPort)
	if err := proc.WaitTCP(redisAddr, 10*time.Second); err != nil {
		return err
	}
	proxy, err := faultproxy.New(redisAddr)
	if err != nil {
		return err
	}
	defer proxy.Close()

	cfgDir := filepath.Join(dir, "config")
	os.Mkdir(cfgDir, 0o755)
	cfgPath := filepath.Join(cfgDir, "soak.yaml")
	if err := os.WriteFile(cfgPath, []byte(configFile(0)), 0o644); err != nil {
		return err
	}
	httpAddr := fmt.Sprintf("127.0.0.1:%d", proc.FreePort())
	serve := exec.Command(bin, "serve", "--config", cfgDir, "--http", httpAddr, "--grpc", fmt.Sprintf("127.0.0.1:%d", proc.FreePort()),
		"--redis", "redis://"+proxy.Addr(), "--deadline", deadline.String(), "--failure-mode", "closed",
		"--log-level", "warn", "--log-sampling", "0")
	var serveLog bytes.Buffer
	lw := &lockedWriter{w: &serveLog}
	serve.Stderr = lw
	logMu := &lw.mu
	if err := serve.Start(); err != nil {
		return err
	}
	defer func() { serve.Process.Signal(syscall.SIGTERM); serve.Wait() }()
	base := "http://" + httpAddr
	if err := proc.WaitHTTP(base+"/readyz", 30*time.Second); err != nil {
		return err
	}

	st := &stats{codes: map[int]int64{}}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	start := time.Now()

	// Load: one pacer hands out request slots to 16 workers.
	slots := make(chan int64, 64)
	go func() {
		defer close(slots)
		tick := time.NewTicker(time.Second / time.Duration(*rate))
		defer tick.Stop()
		for i := int64(0); ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				select {
				case slots <- i:
				default: // workers behind: the slot is skipped, not queued
				}
			}
		}
	}()
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range slots {
				one(client, base, st, i)
			}
		})
	}

	// Faults and resource samples.
	type sample struct {
		at         time.Duration
		rss, gorts int64
	}
	var samples []sample
	faults := map[string]int{}
	var faultsMu sync.Mutex
	gen := 0
	var reloadMissed atomic.Int64
	go func() {
		t := time.NewTicker(*faultEvery)
		defer t.Stop()
		kinds := []string{"latency", "cut", "blackhole", "sigstop", "reload"}
		for k := 0; ; k++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			kind := kinds[k%len(kinds)]
			faultsMu.Lock()
			faults[kind]++
			faultsMu.Unlock()
			switch kind {
			case "latency":
				proxy.SetLatency(2 * *deadline)
				sleep(ctx, 3*time.Second)
				proxy.SetLatency(0)
			case "cut":
				proxy.Cut()
			case "blackhole":
				proxy.SetBlackhole(true)
				sleep(ctx, 2*time.Second)
				proxy.SetBlackhole(false)
			case "sigstop":
				redis.Process.Signal(syscall.SIGSTOP)
				sleep(ctx, 2*time.Second)
				redis.Process.Signal(syscall.SIGCONT)
			case "reload":
				gen++
				os.WriteFile(cfgPath, []byte(configFile(gen)), 0o644)
				sleep(ctx, 200*time.Millisecond)
				serve.Process.Signal(syscall.SIGHUP)
				sleep(ctx, time.Second)
				// The new generation's policy is in force: the reload was applied.
				if resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(fmt.Sprintf(`{"policy":"gen-%d","key":"probe"}`, gen))); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 400 || resp.StatusCode == 404 {
						reloadMissed.Add(1)
					}
				}
			}
		}
	}()
	sampleTick := time.NewTicker(2 * time.Second)
	defer sampleTick.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-sampleTick.C:
			samples = append(samples, sample{time.Since(start), rss(serve.Process.Pid), goroutines(base + "/metrics")})
		}
	}
	wg.Wait()
	proxy.SetLatency(0)
	proxy.SetBlackhole(false)
	redis.Process.Signal(syscall.SIGCONT)
	elapsed := time.Since(start)

	// Bounds.
	var failures []string
	var warmRSS, warmG, maxRSS, maxG int64
	for _, s := range samples {
		if s.at <= *warmup {
			warmRSS, warmG = s.rss, s.gorts
			continue
		}
		maxRSS, maxG = max(maxRSS, s.rss), max(maxG, s.gorts)
	}
	rssBound, gBound := 2*warmRSS+32<<20+headroom.Default, warmG+200
	if warmRSS == 0 {
		failures = append(failures, "no resource sample during warm-up")
	}
	if maxRSS > rssBound {
		failures = append(failures, fmt.Sprintf("RSS %d MiB after warm-up, bound %d MiB", maxRSS>>20, rssBound>>20))
	}
	if maxG > gBound {
		failures = append(failures, fmt.Sprintf("%d goroutines after warm-up, bound %d", maxG, gBound))
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	lats := slices.Clone(st.latencies)
	slices.Sort(lats)
	pct := func(p float64) time.Duration {
		if len(lats) == 0 {
			return 0
		}
		return lats[min(len(lats)-1, int(float64(len(lats))*p))]
	}
	slowest := pct(1)
	over := 0
	for _, l := range lats {
		if l > *deadline+*slack {
			over++
		}
	}
	if over > 0 {
		failures = append(failures, fmt.Sprintf("%d answers slower than deadline %v + slack %v (slowest %v)", over, *deadline, *slack, slowest))
	}
	window := exactPeriod - 2*slowest
	worst := 0
	for k := range st.admitted {
		ts := st.admitted[k]
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		j := 0
		for i := range ts {
			for ts[j].Before(ts[i].Add(-window)) {
				j++
			}
			worst = max(worst, i-j+1)
		}
	}
	if worst > exactRate {
		failures = append(failures, fmt.Sprintf("an exact key admitted %d in %v, limit %d per %v", worst, window, exactRate, exactPeriod))
	}
	if n := reloadMissed.Load(); n > 0 {
		failures = append(failures, fmt.Sprintf("%d reloads not in force a second after SIGHUP", n))
	}
	if st.lost > 0 {
		failures = append(failures, fmt.Sprintf("%d decisions lost (first: %s)", st.lost, st.lostWhy))
	}

	total := int64(len(st.latencies))
	fmt.Printf("soak: %v of mixed load at %d requests/s target; deadline %v, slack %v; %d faults: %v\n\n", elapsed.Round(time.Second), *rate, *deadline, *slack, sum(faults), faults)
	fmt.Println("| measure | value | bound | ok |")
	fmt.Println("|---|---:|---:|---|")
	row := func(m, v, b string, ok bool) {
		fmt.Printf("| %s | %s | %s | %s |\n", m, v, b, map[bool]string{true: "yes", false: "NO"}[ok])
	}
	row("requests answered", strconv.FormatInt(total-st.lost, 10), "", true)
	row("allowed / denied / fail-closed (200 / 429 / 503)", fmt.Sprintf("%d / %d / %d", st.codes[200], st.codes[429], st.codes[503]), "", true)
	row("decisions lost (no answer, other status, not JSON)", strconv.FormatInt(st.lost, 10), "0", st.lost == 0)
	row("latency p50 / p99 / p99.9 / max", fmt.Sprintf("%v / %v / %v / %v", pct(.5).Round(time.Microsecond), pct(.99).Round(time.Microsecond), pct(.999).Round(time.Microsecond), slowest.Round(time.Microsecond)), (*deadline + *slack).String(), over == 0)
	row("exact keys: most admitted in one window", fmt.Sprintf("%d in %v", worst, window.Round(time.Millisecond)), strconv.Itoa(exactRate), worst <= exactRate)
	row("sluice RSS at warm-up end / max after", fmt.Sprintf("%d / %d MiB", warmRSS>>20, maxRSS>>20), fmt.Sprintf("%d MiB", rssBound>>20), maxRSS <= rssBound)
	row("sluice goroutines at warm-up end / max after", fmt.Sprintf("%d / %d", warmG, maxG), strconv.FormatInt(gBound, 10), maxG <= gBound)
	row("config reloads (rewrite + SIGHUP) / not in force after 1 s", fmt.Sprintf("%d / %d", faults["reload"], reloadMissed.Load()), "0 not in force", reloadMissed.Load() == 0)
	logMu.Lock()
	lines := strings.Count(serveLog.String(), "\n")
	logMu.Unlock()
	row("sluice log lines (warn and above)", strconv.Itoa(lines), "", true)
	if len(failures) > 0 {
		fmt.Println()
		for _, f := range failures {
			fmt.Println("FAIL:", f)
		}
		return fmt.Errorf("%d bounds broken", len(failures))
	}
	return nil
}

// one sends request slot i: exact keys, sprayed keys or a two-limit request, in turn.
func one(client *http.Client, base string, st *stats, i int64) {
	var body string
	exact := -1
	switch i % 4 {
	case 0:
		exact = int(i/4) % exactKeys
		body = fmt.Sprintf(`{"policy":"exact","key":"exact-%d"}`, exact)
	case 1, 2:
		body = fmt.Sprintf(`{"policy":"spray","key":"spray-%d"}`, i%100_000)
	default:
		body = fmt.Sprintf(`{"policy":"tenant","key":"tenant-%d"}`, i%50)
	}
	sent := time.Now()
	resp, err := client.Post(base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		st.record(time.Since(sent), 0, err)
		return
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	lat := time.Since(sent)
	switch {
	case err != nil:
	case resp.StatusCode != 200 && resp.StatusCode != 429 && resp.StatusCode != 503:
		err = fmt.Errorf("status %d: %s", resp.StatusCode, b)
	case !json.Valid(b):
		err = fmt.Errorf("status %d with a body that is not JSON: %q", resp.StatusCode, b)
	}
	st.record(lat, resp.StatusCode, err)
	if err == nil && exact >= 0 && resp.StatusCode == 200 {
		st.mu.Lock()
		st.admitted[exact] = append(st.admitted[exact], sent)
		st.mu.Unlock()
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// rss is a process's resident set size in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// goroutines reads go_goroutines from /metrics.
func goroutines(url string) int64 {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(n)
		}
	}
	return 0
}
