package server

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/stack"
)

// t0 is 20 s into a minute, an hour and a day (UTC), so fixed windows end at known times.
var t0 = time.Date(2030, 1, 1, 0, 0, 20, 0, time.UTC)

// testDeadline is the failover deadline of the Redis stacks of these tests: generous,
// since the tests share two cores with everything else, so that a slow answer of a live
// Redis is never taken for a store failure.
const testDeadline = 2 * time.Second

// storeKind is a store the end-to-end tests run on. open builds the production stack
// (stack.Open: observe -> failover -> denycache -> store, as `sluice serve` and `sluice
// proxy` run it) for cfg on a fresh store of the kind, with o's settings and now as the
// clock of the store and the deny cache (nil: the stores' own clocks). The stack is
// closed when the test ends.
type storeKind struct {
	name string
	open func(t testing.TB, cfg *config.Config, now func() time.Time, o stack.Options) *stack.Stack
	// wrap, when set, is put around the stack's limiter before the server gets it.
	wrap func(sluice.Limiter) sluice.Limiter
}

var stores = []storeKind{
	{name: "memory", open: func(t testing.TB, cfg *config.Config, now func() time.Time, o stack.Options) *stack.Stack {
		o.Clock = now
		return openStack(t, cfg, o)
	}},
	{name: "redis", open: func(t testing.TB, cfg *config.Config, now func() time.Time, o stack.Options) *stack.Stack {
		_, st := openRedisStack(t, cfg, now, o)
		return st
	}},
}

// openStack builds the production stack for cfg with o, closed when the test ends. Without
// a clock of the test's own (o.Clock nil) the stack's clock runs in real time from the
// middle of an hour: the tests' limits are mostly hour-long fixed windows, aligned to the
// hour, and one that ended during a test would reset the counts it expects.
func openStack(t testing.TB, cfg *config.Config, o stack.Options) *stack.Stack {
	t.Helper()
	if o.Clock == nil {
		o.Clock = clocktest.Running(clocktest.MidHour)
	}
	st, err := stack.Open(cfg, o)
	if err != nil {
		t.Fatalf("stack.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("closing the stack: %v", err)
		}
	})
	return st
}

// memoryStack is the production stack on the in-memory store with its own clock, for
// tests about something other than the store.
func memoryStack(t testing.TB, cfg *config.Config) *stack.Stack {
	t.Helper()
	return openStack(t, cfg, stack.Options{})
}

// openRedisStack starts a redis-server of the test's own and builds the production stack
// on it (deadline testDeadline unless o sets one), closed when the test ends, before the
// server stops.
func openRedisStack(t testing.TB, cfg *config.Config, now func() time.Time, o stack.Options) (*redistest.Server, *stack.Stack) {
	t.Helper()
	srv := redistest.Start(t)
	o.RedisURL, o.Clock = srv.URL(), now
	if o.Deadline == 0 {
		o.Deadline = testDeadline
	}
	return srv, openStack(t, cfg, o)
}

// loadConfig loads the named files of testdata into one configuration.
func loadConfig(t testing.TB, names ...string) *config.Config {
	t.Helper()
	var files []config.File
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, config.File{Name: n, Data: b})
	}
	cfg, err := config.Parse(files...)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// running is a Server serving on real loopback listeners.
type running struct {
	srv    *Server
	base   string // http://127.0.0.1:port
	conn   *grpc.ClientConn
	rls    rlsv3.RateLimitServiceClient
	health healthpb.HealthClient
	stop   func() error // cancels Serve and returns its error
}

// serve starts s on 127.0.0.1:0 for HTTP and gRPC, stopped at the end of the test.
func serve(t testing.TB, s *Server) *running {
	t.Helper()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, hl, gl) }()
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	var stopped atomic.Bool
	var result error
	r := &running{
		srv:    s,
		base:   "http://" + hl.Addr().String(),
		conn:   conn,
		rls:    rlsv3.NewRateLimitServiceClient(conn),
		health: healthpb.NewHealthClient(conn),
	}
	r.stop = func() error {
		if stopped.Swap(true) {
			return result
		}
		cancel()
		select {
		case result = <-done:
		case <-time.After(30 * time.Second):
			result = errors.New("Serve did not return within 30s of its context ending")
		}
		return result
	}
	t.Cleanup(func() {
		conn.Close()
		if err := r.stop(); err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return r
}

// newServer starts a Server on the production stack of a fresh store of kind k with cfg
// and a clock at t0, wired as `sluice serve` wires it: the stack's limiter, its readiness
// and one metrics registry for both.
func newServer(t *testing.T, k storeKind, cfg *config.Config, opts Options) (*running, *clocktest.Clock) {
	t.Helper()
	r, c, _ := newStackServer(t, k, cfg, stack.Options{}, opts)
	return r, c
}

// newStackServer is newServer with the stack's options o (its FailureMode is
// opts.FailureMode unless o sets one, as the --failure-mode flag sets both), and returns
// the stack.
func newStackServer(t *testing.T, k storeKind, cfg *config.Config, o stack.Options, opts Options) (*running, *clocktest.Clock, *stack.Stack) {
	t.Helper()
	c := clocktest.New(t0)
	if opts.Config == nil && opts.Watcher == nil {
		opts.Config = cfg
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if o.Registry == nil {
		o.Registry = opts.Registry
	}
	if o.FailureMode == sluice.FailInherit {
		o.FailureMode = opts.FailureMode
	}
	scfg := opts.Config
	if opts.Watcher != nil {
		scfg = opts.Watcher.Config() // the store block in force at the start, as serve reads it
	}
	st := k.open(t, scfg, c.Now, o)
	opts.Limiter, opts.Ready = st.Limiter(), st.Ready
	if opts.Overrides == nil {
		opts.Overrides = st.Overrides
	}
	if k.wrap != nil {
		opts.Limiter = k.wrap(opts.Limiter)
	}
	opts.Now = c.Now
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, s), c, st
}
