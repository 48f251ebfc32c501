package server

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/internal/testcert"
)

// TestServeTLS: with Options.TLS, Serve speaks HTTPS (HTTP/2 negotiated by ALPN) and gRPC
// over TLS on its two listeners, and a plaintext gRPC client is not served.
func TestServeTLS(t *testing.T) {
	ca := testcert.NewCA(t, "test CA")
	certPEM, keyPEM := ca.Server(t, "sluice")
	pair := testcert.KeyPair(t, certPEM, keyPEM)
	cfg := loadConfig(t, "edge.yaml")
	st := memoryStack(t, cfg)
	s, err := New(Options{Limiter: st.Limiter(), Ready: st.Ready, Config: cfg, TLS: &tls.Config{Certificates: []tls.Certificate{pair}}})
	if err != nil {
		t.Fatal(err)
	}
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, hl, gl) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + hl.Addr().String() + "/healthz")
	if err != nil {
		t.Fatalf("HTTPS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
		t.Fatalf("HTTPS /healthz: %s %s, want 200 over HTTP/2", resp.Proto, resp.Status)
	}

	req := edgeReq(desc("remote_address", "192.0.2.1"))
	call := func(creds credentials.TransportCredentials) (*rlsv3.RateLimitResponse, error) {
		conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	}
	if r, err := call(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()})); err != nil || r.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("gRPC over TLS: %v, %v", r, err)
	}
	if _, err := call(insecure.NewCredentials()); err == nil || !strings.Contains(err.Error(), "Unavailable") {
		t.Fatalf("plaintext gRPC to a TLS listener: %v, want Unavailable", err)
	}
}
