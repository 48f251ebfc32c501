package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/poll"
)

// TestServeMaxConnections: with --max-connections 3, the gRPC listener holds three
// connections a client opens and keeps idle, closes a fourth as soon as it is accepted and
// counts it, and serves again once one of the three is closed. Without a bound, each
// connection a client opened cost the service memory until the pod's limit (issue 39,
// item 5).
func TestServeMaxConnections(t *testing.T) {
	base, grpcAddr, _ := started(t, "--max-connections", "3", "--log-level", "warn")
	waitMetric := func(name string, want float64) {
		t.Helper()
		poll.UntilDescribed(t, 20*time.Second, fmt.Sprintf("%s at %v", name, want),
			func() bool { return metricValue(t, base, name) == want },
			func() string { return fmt.Sprint(metricValue(t, base, name)) })
	}
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", grpcAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waitMetric(`sluice_server_connections{listener="grpc"}`, 3)

	over, err := net.Dial("tcp", grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	// The event is the server closing the connection; the deadline only turns its absence
	// (the connection held like the others: no bound) into a failure rather than a hang.
	over.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := over.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a 4th connection over a bound of 3: read %d bytes, %v; want it closed", n, err)
	}
	if v := metricValue(t, base, `sluice_server_connections_refused_total{listener="grpc"}`); v != 1 {
		t.Errorf("sluice_server_connections_refused_total{grpc} %v, want 1", v)
	}

	held[0].Close()
	waitMetric(`sluice_server_connections{listener="grpc"}`, 2)
	resp, err := rlsClient(t, grpcAddr).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "demo",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "203.0.113.1")}})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("a call once a connection was closed: %v, %v", resp, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestProxyMaxConnections: with --max-connections 2, sluice proxy holds two connections
// a client opens and keeps idle, closes a third as soon as it is accepted, and serves
// again once one of the two is closed. Before, its listener had no bound.
func TestProxyMaxConnections(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	addr := startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--max-connections", "2", "--log-level", "warn")
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// The first two are accepted in order; the third is closed on accept. The event is
	// the proxy closing it; the deadline only turns a held connection (no bound) into a
	// failure rather than a hang.
	over, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer over.Close()
	over.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := over.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a 3rd connection over a bound of 2: read %d bytes, %v; want it closed", n, err)
	}
	held[0].Close()
	// The proxy sees the close when it next reads; a new connection is then served.
	status, lastErr := 0, error(nil)
	poll.UntilDescribed(t, 20*time.Second, "a connection served after one of the two closed", func() bool {
		rp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + addr + "/x")
		if lastErr = err; err != nil {
			return false
		}
		rp.Body.Close()
		status = rp.StatusCode
		return true
	}, func() string { return fmt.Sprint(lastErr) })
	if status != 200 {
		t.Fatalf("after a close: %d", status)
	}
}
