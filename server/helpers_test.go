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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
)

// t0 is 20 s into a minute, an hour and a day (UTC), so fixed windows end at known times.
var t0 = time.Date(2030, 1, 1, 0, 0, 20, 0, time.UTC)

// storeKind is a store the end-to-end tests run on.
type storeKind struct {
	name string
	open func(t *testing.T, now func() time.Time) sluice.Limiter
}

var stores = []storeKind{
	{"memory", func(t *testing.T, now func() time.Time) sluice.Limiter {
		s := memory.New(memory.WithClock(now))
		t.Cleanup(func() { s.Close() })
		return s
	}},
	{"redis", func(t *testing.T, now func() time.Time) sluice.Limiter {
		_, s := openRedis(t, redisstore.WithClock(now))
		return s
	}},
}

// openRedis starts a redis-server of the test's own and opens a store on it, closed when
// the test ends.
func openRedis(t *testing.T, opts ...redisstore.Option) (*redistest.Server, *redisstore.Store) {
	t.Helper()
	srv := redistest.Start(t)
	s, err := redisstore.Open(srv.URL(), opts...)
	if err != nil {
		t.Fatalf("redisstore.Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return srv, s
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

// newServer starts a Server on a fresh store of kind k with cfg and a clock at t0.
func newServer(t *testing.T, k storeKind, cfg *config.Config, opts Options) (*running, *clocktest.Clock) {
	t.Helper()
	c := clocktest.New(t0)
	opts.Limiter = k.open(t, c.Now)
	if opts.Config == nil && opts.Watcher == nil {
		opts.Config = cfg
	}
	opts.Now = c.Now
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, s), c
}
