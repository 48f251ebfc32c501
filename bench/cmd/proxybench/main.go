// Command proxybench measures `sluice proxy` against other proxies in the gateway
// placement, on loopback, with wrk as the load generator: each proxy stands in front of
// an upstream of its own that answers 200 at once, every request carries an X-Client
// header picked at random out of -keys values, and each proxy limits by that header with
// a limit that never denies. The proxies:
//
//	nginx limit_req        limit_req_zone on $http_x_client, upstream keepalive 256
//	ReverseProxy, default  httputil.ReverseProxy, http.DefaultTransport, no limiter
//	ReverseProxy, tuned    the same, MaxIdleConnsPerHost 256, no limiter
//	ReverseProxy, pooled   the tuned one copying bodies through pooled buffers
//	                       (BufferPool), as sluice proxy does
//	ReverseProxy, pooled, sluice proxy's timeouts
//	                       the pooled one behind an http.Server with sluice proxy's
//	                       default listener timeouts (server.DefaultProxyTimeouts), which
//	                       set read and write deadlines on the connection per request:
//	                       the same server as sluice's, so its difference to sluice is
//	                       what the limiter costs
//	sluice proxy, memory   the real binary, built from ../cmd/sluice, a policy on X-Client
//	sluice proxy, redis    the same on a redis-server of its own (-redis)
//
// The ReverseProxies and the upstreams pace their collector as sluice proxy does by default
// (internal/headroom's default heap headroom; -gc-headroom sets it for all of them), so
// that the ReverseProxies differ from sluice only in what they do.
//
// Every proxy and every upstream is a process of its own, so that the CPU time of each
// (user + system, from /proc/<pid>/stat, nginx's workers included) is read apart over
// the measured interval and divided by the requests wrk completed in it. The upstream
// counts the connections it accepts, so that each row reports the upstream connections
// the proxy opened during the run. All proxies are up at once and measured in turn for
// -rounds rounds, so that the ratios of a round come from runs seconds apart.
//
//	cd bench && go run ./cmd/proxybench                  # about 5 minutes
//	cd bench && go run ./cmd/proxybench -d 5s -rounds 2  # shorter
//	cd bench && go run ./cmd/proxybench -profile /tmp/proxy.pprof   # and CPU profiles of sluice proxy (memory) and the pooled ReverseProxy
//
// It needs wrk and nginx (apt-get install wrk nginx-light), and redis-server for the
// Redis row (apt-get install redis-server; -redis=false skips it). It writes nothing
// outside a temporary directory, and nginx runs in the foreground with its own prefix,
// pid file and error log there.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	_ "net/http/pprof"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/internal/headroom"
	"github.com/sluicehq/sluice/server"
)

var (
	dur       = flag.Duration("d", 10*time.Second, "how long each measured run lasts")
	warmup    = flag.Duration("warmup", 2*time.Second, "how long wrk runs before each measured run (fills connection pools and the limiter's keys)")
	rounds    = flag.Int("rounds", 3, "how many times every proxy is measured, in turn")
	conns     = flag.Int("c", 32, "wrk's connections")
	threads   = flag.Int("t", 2, "wrk's threads")
	nkeys     = flag.Int("keys", 100000, "distinct X-Client values")
	withRed   = flag.Bool("redis", true, "also measure sluice proxy on Redis (needs redis-server)")
	only      = flag.String("only", "", "measure only these proxies, comma-separated: nginx, default, tuned, pooled, timeouts, sluice, sluice-redis")
	prebuilt  = flag.String("sluice", "", "use this sluice binary instead of building ../cmd/sluice")
	sluiceCf  = flag.String("sluice-config", "", "run sluice proxy with this configuration file instead of the bench's policy on X-Client")
	headroomF = flag.Int64("gc-headroom", headroom.Default, "the heap headroom of every Go process measured (internal/headroom): sluice proxy's --gc-headroom-bytes (passed only when set here, so that binaries without the flag run), the ReverseProxies' and the upstreams' own, so that the ReverseProxies differ from sluice only in what they do; 0: Go's own pacing for all")
	profile   = flag.String("profile", "", "after the rounds, write CPU profiles under the same load, -d long, of sluice proxy (memory) to this file and of the pooled ReverseProxy to this file + \".pooled\"")

	// The roles proxybench runs itself in, as the upstream and the bare proxies.
	role      = flag.String("role", "", "internal: upstream or reverseproxy")
	listen    = flag.String("listen", "", "internal: the role's listen address")
	statsAddr = flag.String("stats", "", "internal (upstream): the address that reports the connections accepted")
	upstream  = flag.String("upstream", "", "internal (reverseproxy): the upstream URL")
	idle      = flag.Int("idle", 0, "internal (reverseproxy): MaxIdleConnsPerHost; 0 keeps http.DefaultTransport")
	rpPprof   = flag.String("pprof", "", "internal (reverseproxy): serve net/http/pprof on this address")
	pool      = flag.Bool("pool", false, "internal (reverseproxy): copy bodies through pooled buffers (ReverseProxy.BufferPool), as sluice proxy does")
	timeouts  = flag.Bool("timeouts", false, "internal (reverseproxy): serve with sluice proxy's listener timeouts (server.DefaultProxyTimeouts)")
)

func main() {
	flag.Parse()
	if *role != "" {
		defer headroom.Start(*headroomF)()
	}
	var err error
	switch *role {
	case "":
		err = run()
	case "upstream":
		err = serveUpstream(*listen, *statsAddr)
	case "reverseproxy":
		err = serveReverseProxy(*listen, *upstream, *idle, *pool, *timeouts)
	default:
		err = fmt.Errorf("unknown -role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxybench:", err)
		os.Exit(1)
	}
}

// serveUpstream answers every request on addr with 200 and a 3-byte body, at once, and
// reports on stats the connections it has accepted ("/conns", a decimal count).
func serveUpstream(addr, stats string) error {
	var accepted atomic.Int64
	body := []byte("ok\n")
	srv := &http.Server{
		Addr: addr,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = []string{"text/plain"}
			w.Write(body)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				accepted.Add(1)
			}
		},
	}
	go http.ListenAndServe(stats, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, accepted.Load())
	}))
	return untilSignal(srv)
}

// serveReverseProxy serves an httputil.ReverseProxy to up on addr, rewriting as sluice
// proxy does (SetURL, SetXForwarded), with http.DefaultTransport or, when idle > 0, a
// clone of it keeping idle connections per host; with pool, it copies response bodies
// through pooled buffers; with timeouts, its listener has sluice proxy's default
// timeouts, which set a read and a write deadline on the connection for every request.
func serveReverseProxy(addr, up string, idle int, pool, timeouts bool) error {
	u, err := url.Parse(up)
	if err != nil {
		return err
	}
	t := http.DefaultTransport
	if idle > 0 {
		tt := http.DefaultTransport.(*http.Transport).Clone()
		tt.MaxIdleConns, tt.MaxIdleConnsPerHost = idle, idle
		t = tt
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
		},
		Transport: t,
		// wrk cuts its connections at the end of a run: not worth a line each.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	if pool {
		rp.BufferPool = buffers{}
	}
	if *rpPprof != "" {
		go http.ListenAndServe(*rpPprof, nil) // net/http/pprof's handlers
	}
	srv := &http.Server{Addr: addr, Handler: rp}
	if timeouts {
		srv = server.DefaultProxyTimeouts.Server(rp)
		srv.Addr = addr
	}
	return untilSignal(srv)
}

// buffers is a BufferPool of ReverseProxy's 32 KiB copy buffers.
type buffers struct{}

var bufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (buffers) Get() []byte { return bufferPool.Get().(*[32 << 10]byte)[:] }
func (buffers) Put(b []byte) {
	if len(b) == 32<<10 {
		bufferPool.Put((*[32 << 10]byte)(b))
	}
}

// untilSignal serves srv until SIGTERM or SIGINT.
func untilSignal(srv *http.Server) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return srv.Close()
	}
}

// target is one proxy under test, with its upstream.
type target struct {
	name     string
	proxy    *exec.Cmd
	upstream *exec.Cmd
	addr     string // the proxy's listen address
	stats    string // the upstream's stats address
	logPath  string // the proxy's stderr, shown when it fails
}

func (t *target) stop() {
	for _, c := range []*exec.Cmd{t.proxy, t.upstream} {
		if c != nil && c.Process != nil {
			c.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				c.Process.Kill()
				<-done
			}
		}
	}
}

// sample is one measured run of one target.
type sample struct {
	rps          float64
	requests     int64
	p50, p99     time.Duration
	proxyCPU     float64 // µs per request
	upCPU        float64 // µs per request
	newConns     int64   // upstream connections accepted during the run
	non2xx, errs int64
}

type bench struct {
	dir, self, sluiceBin, script string
	redisURL                     string
}

func run() error {
	wrkBin, err := exec.LookPath("wrk")
	if err != nil {
		return errors.New("wrk not found on PATH: install it with apt-get install wrk")
	}
	nginxBin, err := findNginx()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	use := func(name string) bool { return len(want) == 0 || want[name] }

	dir, err := os.MkdirTemp("", "proxybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{dir: dir, sluiceBin: *prebuilt, script: filepath.Join(dir, "clients.lua")}
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if b.sluiceBin == "" {
		b.sluiceBin = filepath.Join(dir, "sluice")
		cmd := exec.Command("go", "build", "-o", b.sluiceBin, "./cmd/sluice")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/sluice (run proxybench from the bench directory): %v\n%s", err, out)
		}
	}
	if err := os.WriteFile(b.script, []byte(fmt.Sprintf(wrkScript, *nkeys)), 0o644); err != nil {
		return err
	}
	if *withRed && use("sluice-redis") {
		stopRedis, err := b.startRedis()
		if err != nil {
			return err
		}
		defer stopRedis()
	}

	var targets []*target
	defer func() {
		for _, t := range targets {
			t.stop()
		}
	}()
	starts := []struct {
		name  string
		start func(up string) (*exec.Cmd, string, error)
	}{
		{"nginx", func(up string) (*exec.Cmd, string, error) { return b.startNginx(nginxBin, up) }},
		{"default", func(up string) (*exec.Cmd, string, error) { return b.startReverseProxy(up, 0, false, false) }},
		{"tuned", func(up string) (*exec.Cmd, string, error) { return b.startReverseProxy(up, 256, false, false) }},
		{"pooled", func(up string) (*exec.Cmd, string, error) { return b.startReverseProxy(up, 256, true, false) }},
		{"timeouts", func(up string) (*exec.Cmd, string, error) { return b.startReverseProxy(up, 256, true, true) }},
		{"sluice", func(up string) (*exec.Cmd, string, error) { return b.startSluice(up, "") }},
		{"sluice-redis", func(up string) (*exec.Cmd, string, error) { return b.startSluice(up, b.redisURL) }},
	}
	for _, s := range starts {
		if !use(s.name) || (s.name == "sluice-redis" && b.redisURL == "") {
			continue
		}
		t := &target{name: names[s.name]}
		targets = append(targets, t)
		var upAddr string
		if t.upstream, upAddr, t.stats, err = b.startUpstream(); err != nil {
			return err
		}
		switch {
		case strings.HasPrefix(s.name, "sluice"):
			t.logPath = filepath.Join(dir, s.name+".log")
		case s.name == "nginx":
			t.logPath = filepath.Join(dir, "nginx", "error.log")
		}
		if t.proxy, t.addr, err = s.start("http://" + upAddr); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if err := proc.WaitHTTP("http://"+t.addr+"/", 20*time.Second); err != nil {
			return fmt.Errorf("%s: %w%s", t.name, err, tail(t.logPath))
		}
	}

	fmt.Printf("proxybench: %d cores, %s, load average before: %s\n", runtime.NumCPU(), runtime.Version(), loadavg())
	fmt.Printf("wrk -t%d -c%d, %v per run after %v of warm-up, X-Client random out of %d, %d rounds\n\n", *threads, *conns, *dur, *warmup, *nkeys, *rounds)
	fmt.Println("| round | proxy | requests/s | p50 | p99 | proxy CPU µs/request | upstream CPU µs/request | new upstream connections | non-2xx | errors |")
	fmt.Println("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	all := map[string][]sample{}
	for round := 1; round <= *rounds; round++ {
		for _, t := range targets {
			if _, err := b.wrk(wrkBin, t, *warmup); err != nil {
				return fmt.Errorf("%s: warm-up: %w", t.name, err)
			}
			s, err := b.measure(wrkBin, t)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			all[t.name] = append(all[t.name], s)
			fmt.Printf("| %d | %s | %.0f | %s | %s | %.1f | %.1f | %d | %d | %d |\n", round, t.name, s.rps, ms(s.p50), ms(s.p99),
				s.proxyCPU, s.upCPU, s.newConns, s.non2xx, s.errs)
		}
	}
	fmt.Printf("\nSummary, the range over the rounds:\n\n")
	fmt.Println("| proxy | requests/s | p99 | proxy CPU µs/request | upstream CPU µs/request | new upstream connections per run |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	for _, t := range targets {
		ss := all[t.name]
		fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", t.name,
			span(ss, func(s sample) float64 { return s.rps }, "%.0f"),
			span(ss, func(s sample) float64 { return float64(s.p99) / 1e6 }, "%.2f ms"),
			span(ss, func(s sample) float64 { return s.proxyCPU }, "%.1f"),
			span(ss, func(s sample) float64 { return s.upCPU }, "%.1f"),
			span(ss, func(s sample) float64 { return float64(s.newConns) }, "%.0f"))
	}
	for _, base := range []string{"tuned", "pooled", "timeouts"} {
		bs := all[names[base]]
		for _, n := range []string{"sluice", "sluice-redis", "nginx"} {
			ss := all[names[n]]
			if len(ss) == 0 || len(bs) != len(ss) {
				continue
			}
			var rs []string
			for i := range ss {
				rs = append(rs, fmt.Sprintf("%.2f×", ss[i].proxyCPU/bs[i].proxyCPU))
			}
			fmt.Printf("\n%s: proxy CPU per request ÷ that of %s, by round: %s", names[n], names[base], strings.Join(rs, ", "))
		}
	}
	fmt.Printf("\n\nload average after: %s\n", loadavg())

	if *profile != "" {
		done := false
		for _, t := range targets {
			switch t.name {
			case names["sluice"]:
				err = b.profile(wrkBin, t, sluicePprof, *profile)
			case names["pooled"]:
				err = b.profile(wrkBin, t, pooledPprof, *profile+".pooled")
			default:
				continue
			}
			if err != nil {
				return err
			}
			done = true
		}
		if !done {
			return errors.New("-profile needs sluice proxy (memory) or the pooled ReverseProxy among the targets")
		}
	}
	return nil
}

// names are the tables' names of the targets.
var names = map[string]string{
	"nginx":        "nginx limit_req",
	"default":      "ReverseProxy, default transport",
	"tuned":        "ReverseProxy, MaxIdleConnsPerHost 256",
	"pooled":       "ReverseProxy, MaxIdleConnsPerHost 256, BufferPool",
	"timeouts":     "ReverseProxy, MaxIdleConnsPerHost 256, BufferPool, sluice proxy's timeouts",
	"sluice":       "sluice proxy, memory",
	"sluice-redis": "sluice proxy, Redis",
}

// wrkScript sends every request with an X-Client header picked at random out of %d
// values, and reports the run as one JSON line (latencies in µs).
const wrkScript = `
local n = %d
local id = 0
function setup(thread)
  id = id + 1
  thread:set("id", id)
end
function init(args)
  math.randomseed(os.time() * 1000 + id)
end
function request()
  return wrk.format("GET", "/", {["X-Client"] = "client-" .. math.random(1, n)})
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('JSON {"requests":%%d,"duration_us":%%d,"p50_us":%%d,"p99_us":%%d,"non2xx":%%d,"errors":%%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect + e.read + e.write + e.timeout))
end
`

type wrkResult struct {
	Requests   int64 `json:"requests"`
	DurationUS int64 `json:"duration_us"`
	P50        int64 `json:"p50_us"`
	P99        int64 `json:"p99_us"`
	Non2xx     int64 `json:"non2xx"`
	Errors     int64 `json:"errors"`
}

func (b *bench) wrk(bin string, t *target, d time.Duration) (wrkResult, error) {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cmd := exec.Command(bin, "-t", strconv.Itoa(*threads), "-c", strconv.Itoa(*conns), "-d", strconv.Itoa(secs)+"s",
		"--latency", "-s", b.script, "http://"+t.addr+"/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	_, line, ok := bytes.Cut(out, []byte("JSON "))
	if !ok {
		return wrkResult{}, fmt.Errorf("wrk printed no summary:\n%s", out)
	}
	line, _, _ = bytes.Cut(line, []byte("\n"))
	var r wrkResult
	if err := json.Unmarshal(line, &r); err != nil {
		return r, fmt.Errorf("wrk's summary %q: %w", line, err)
	}
	if r.Requests == 0 {
		return r, fmt.Errorf("wrk completed no request:\n%s%s", out, tail(t.logPath))
	}
	return r, nil
}

// measure runs wrk against t for -d and reads, over the same interval, the CPU time
// of the proxy and of its upstream and the connections the upstream accepted.
func (b *bench) measure(bin string, t *target) (sample, error) {
	c0, err := acceptedConns(t.stats)
	if err != nil {
		return sample{}, err
	}
	p0, u0 := proc.TreeCPU(t.proxy.Process.Pid), proc.TreeCPU(t.upstream.Process.Pid)
	r, err := b.wrk(bin, t, *dur)
	if err != nil {
		return sample{}, err
	}
	p1, u1 := proc.TreeCPU(t.proxy.Process.Pid), proc.TreeCPU(t.upstream.Process.Pid)
	c1, err := acceptedConns(t.stats)
	if err != nil {
		return sample{}, err
	}
	n := float64(r.Requests)
	return sample{
		rps: n / (float64(r.DurationUS) / 1e6), requests: r.Requests,
		p50: time.Duration(r.P50) * time.Microsecond, p99: time.Duration(r.P99) * time.Microsecond,
		proxyCPU: float64(p1-p0) / n, upCPU: float64(u1-u0) / n,
		newConns: c1 - c0, non2xx: r.Non2xx, errs: r.Errors,
	}, nil
}

// profile takes a CPU profile of t through its pprof listener at addr while wrk loads
// it for -d.
func (b *bench) profile(bin string, t *target, addr, path string) error {
	secs := max(1, int(dur.Round(time.Second)/time.Second))
	type got struct {
		body []byte
		err  error
	}
	ch := make(chan got, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
		if err != nil {
			ch <- got{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("pprof: %s: %s", resp.Status, body)
		}
		ch <- got{body, err}
	}()
	if _, err := b.wrk(bin, t, *dur+time.Second); err != nil {
		return err
	}
	g := <-ch
	if g.err != nil {
		return g.err
	}
	if err := os.WriteFile(path, g.body, 0o644); err != nil {
		return err
	}
	fmt.Printf("CPU profile of %s under load written to %s (go tool pprof -top %s)\n", t.name, path, path)
	return nil
}

// startUpstream starts proxybench as an upstream on a free port.
func (b *bench) startUpstream() (cmd *exec.Cmd, addr, stats string, err error) {
	addr, stats = proc.FreeAddr(), proc.FreeAddr()
	cmd = exec.Command(b.self, "-role", "upstream", "-listen", addr, "-stats", stats, "-gc-headroom", strconv.FormatInt(*headroomF, 10))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", "", err
	}
	if err := proc.WaitHTTP("http://"+addr+"/", 20*time.Second); err != nil {
		return cmd, "", "", err
	}
	return cmd, addr, stats, proc.WaitHTTP("http://"+stats+"/", 20*time.Second)
}

// startReverseProxy starts proxybench as a bare ReverseProxy to up (serveReverseProxy's
// idle, pool and timeouts). The pooled one without timeouts serves pprof, for -profile.
func (b *bench) startReverseProxy(up string, idle int, pool, timeouts bool) (*exec.Cmd, string, error) {
	addr := proc.FreeAddr()
	cmd := exec.Command(b.self, "-role", "reverseproxy", "-listen", addr, "-upstream", up, "-idle", strconv.Itoa(idle),
		"-pool="+strconv.FormatBool(pool), "-timeouts="+strconv.FormatBool(timeouts), "-gc-headroom", strconv.FormatInt(*headroomF, 10))
	if pool && !timeouts {
		pooledPprof = proc.FreeAddr()
		cmd.Args = append(cmd.Args, "-pprof", pooledPprof)
	}
	cmd.Stderr = os.Stderr
	return cmd, addr, cmd.Start()
}

// sluiceConfig limits every client, named by its X-Client header, to far more than the
// load gives one of them: the proxy decides every request and denies none. wrk connects
// from loopback, which the configuration names a trusted proxy: a header that names an
// identity is believed only from one, and without it every request is one client.
const sluiceConfig = `identity:
  trusted_proxies: [127.0.0.1/32, "::1/128"]
policies:
  - name: clients
    key: {type: user, header: X-Client}
    rate: 1000
    period: second
`

// sluicePprof and pooledPprof are the pprof addresses of sluice proxy on memory and of
// the ReverseProxy with BufferPool, set when they start.
var sluicePprof, pooledPprof string

// startSluice starts sluice proxy in front of up, on memory or, with redisURL, on Redis;
// its own settings are the defaults (log level info, decision log sampled at 1%).
func (b *bench) startSluice(up, redisURL string) (*exec.Cmd, string, error) {
	cfgDir := filepath.Join(b.dir, "sluice-config")
	os.MkdirAll(cfgDir, 0o755)
	cfg := []byte(sluiceConfig)
	if *sluiceCf != "" {
		var err error
		if cfg, err = os.ReadFile(*sluiceCf); err != nil {
			return nil, "", err
		}
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "policies.yaml"), cfg, 0o644); err != nil {
		return nil, "", err
	}
	addr := proc.FreeAddr()
	args := []string{"proxy", "--config", cfgDir, "--upstream", up, "--listen", addr}
	if proc.Given("gc-headroom") {
		args = append(args, "--gc-headroom-bytes", strconv.FormatInt(*headroomF, 10))
	}
	name := "sluice"
	if redisURL != "" {
		// A deadline long enough that the store decides every request, not the failure
		// mode, on a loaded machine.
		args = append(args, "--redis", redisURL, "--deadline", "100ms")
		name = "sluice-redis"
	} else {
		sluicePprof = proc.FreeAddr()
		args = append(args, "--pprof", sluicePprof)
	}
	logf, err := os.Create(filepath.Join(b.dir, name+".log"))
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(b.sluiceBin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	return cmd, addr, cmd.Start()
}

// nginxConfig limits requests by $http_x_client (rate far above the load's per client)
// and keeps up to 256 idle connections to the upstream. No access log: sluice logs no
// allowed request either.
const nginxConfig = `daemon off;
master_process on;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  limit_req_zone $http_x_client zone=clients:64m rate=10000r/s;
  upstream up {
    server %[2]s;
    keepalive 256;
  }
  server {
    listen %[3]s;
    location / {
      limit_req zone=clients burst=1000 nodelay;
      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`

func findNginx() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx", nil
	}
	return "", errors.New("nginx not found on PATH or at /usr/sbin/nginx: install it with apt-get install nginx-light (or nginx)")
}

// startNginx runs nginx in the foreground, with a prefix, configuration, pid file and
// error log of its own under the temporary directory.
func (b *bench) startNginx(bin, up string) (*exec.Cmd, string, error) {
	prefix := filepath.Join(b.dir, "nginx")
	if err := os.MkdirAll(filepath.Join(prefix, "logs"), 0o755); err != nil {
		return nil, "", err
	}
	addr := proc.FreeAddr()
	conf := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(nginxConfig, prefix, strings.TrimPrefix(up, "http://"), addr)), 0o644); err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, "-p", prefix+"/", "-c", conf, "-e", filepath.Join(prefix, "error.log"))
	cmd.Stderr = os.Stderr
	return cmd, addr, cmd.Start()
}

// startRedis starts a redis-server of the bench's own on a free port.
func (b *bench) startRedis() (stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found: install it with apt-get install redis-server, or pass -redis=false")
	}
	addr := proc.FreeAddr()
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", b.dir)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	if err := proc.WaitTCP(addr, 10*time.Second); err != nil {
		stop()
		return nil, err
	}
	b.redisURL = "redis://" + addr
	return stop, nil
}

func acceptedConns(stats string) (int64, error) {
	resp, err := http.Get("http://" + stats + "/conns")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(body), 10, 64)
}

// span formats the range of f over ss ("a–b", or "a" when they agree).
func span(ss []sample, f func(sample) float64, format string) string {
	if len(ss) == 0 {
		return "–"
	}
	vs := make([]float64, len(ss))
	for i, s := range ss {
		vs[i] = f(s)
	}
	lo, hi := slices.Min(vs), slices.Max(vs)
	a, z := fmt.Sprintf(format, lo), fmt.Sprintf(format, hi)
	if a == z {
		return a
	}
	return a + "–" + z
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

func tail(path string) string {
	if path == "" {
		return ""
	}
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n" + string(b)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
