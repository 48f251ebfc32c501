// Command floor is an Envoy rate limit service that decides nothing: ShouldRateLimit
// answers OK at once, with one OK status per descriptor, from the same go-control-plane
// stubs, with the same gRPC transport settings as sluice serve (server.NewGRPCServer:
// stream workers, fixed 1 MiB flow-control windows) and the same collector pacing (its
// default heap headroom, internal/headroom). servicebench measures it beside
// sluice and envoyproxy/ratelimit, under the same load generator on the same machine, so
// that every figure has its floor beside it: the requests/s and the latency that the
// transport, the load generator and the machine allow a service whose decisions cost
// nothing.
//
//	floor -grpc 127.0.0.1:8081
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"syscall"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluicehq/sluice/internal/headroom"
)

type floor struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

func (floor) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	st := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(r.Descriptors))
	for i := range st {
		st[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: st}, nil
}

func main() {
	addr := flag.String("grpc", "127.0.0.1:8081", "the gRPC listen address")
	gcHeadroom := flag.Int64("gc-headroom", headroom.Default, "pace the collector by this heap headroom (internal/headroom), as sluice serve does by default (--gc-headroom-bytes); 0: Go's own pacing")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file, to compare with sluice serve's /debug/pprof/profile")
	flag.Parse()
	defer headroom.Start(*gcHeadroom)()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	// sluice serve's transport settings (server.NewGRPCServer), so that the floor differs
	// from it only in deciding nothing.
	const window = 1 << 20
	g := grpc.NewServer(
		grpc.NumStreamWorkers(uint32(64*runtime.GOMAXPROCS(0))),
		grpc.InitialWindowSize(window),
		grpc.InitialConnWindowSize(window),
	)
	rlsv3.RegisterRateLimitServiceServer(g, floor{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() { <-sig; g.GracefulStop() }()
	if err := g.Serve(l); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}
