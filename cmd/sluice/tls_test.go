package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/testcert"
	"github.com/sluicehq/sluice/server"
)

// tlsFixture is a CA, a server certificate for the listeners and a client certificate,
// written to files in a temporary directory.
type tlsFixture struct {
	ca                        *testcert.CA
	dir                       string
	caFile, certFile, keyFile string
	clientCert, clientKey     string
	clientPair                tls.Certificate
	otherCA                   *testcert.CA
	strangerCert, strangerKey string
	strangerPair              tls.Certificate
}

func newTLSFixture(t *testing.T) *tlsFixture {
	f := &tlsFixture{ca: testcert.NewCA(t, "sluice test CA"), otherCA: testcert.NewCA(t, "another CA"), dir: t.TempDir()}
	f.caFile = testcert.WriteFile(t, f.dir, "ca.pem", f.ca.PEM)
	c, k := f.ca.Server(t, "sluice v1")
	f.certFile, f.keyFile = testcert.WriteFile(t, f.dir, "tls.crt", c), testcert.WriteFile(t, f.dir, "tls.key", k)
	c, k = f.ca.Client(t, "envoy")
	f.clientCert, f.clientKey = testcert.WriteFile(t, f.dir, "client.crt", c), testcert.WriteFile(t, f.dir, "client.key", k)
	f.clientPair = testcert.KeyPair(t, c, k)
	c, k = f.otherCA.Client(t, "stranger")
	f.strangerCert, f.strangerKey = testcert.WriteFile(t, f.dir, "stranger.crt", c), testcert.WriteFile(t, f.dir, "stranger.key", k)
	f.strangerPair = testcert.KeyPair(t, c, k)
	return f
}

// httpsClient trusts the fixture's CA and presents certs.
func (f *tlsFixture) httpsClient(certs ...tls.Certificate) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: f.ca.Pool(), Certificates: certs}
	t.ForceAttemptHTTP2 = true
	return &http.Client{Transport: t, Timeout: 10 * time.Second}
}

// servedCN returns the common name of the certificate the server at addr presents.
func (f *tlsFixture) servedCN(t *testing.T, addr string) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: f.ca.Pool(), Certificates: []tls.Certificate{f.clientPair}})
	if err != nil {
		t.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// TestServeTLS: with --tls-cert, --tls-key and --tls-client-ca, both APIs speak TLS and
// accept only clients with a certificate from the client CA; `sluice check` reaches them
// with --tls-ca and a client certificate; a certificate rotated on disk is served from
// the next connection on, and a half-written rotation keeps the old one.
func TestServeTLS(t *testing.T) {
	f := newTLSFixture(t)
	base, grpcAddr, logs := started(t, "--tls-cert", f.certFile, "--tls-key", f.keyFile, "--tls-client-ca", f.caFile)
	httpsBase := strings.Replace(base, "http://", "https://", 1)
	body := `{"policy":"demo","key":"203.0.113.9"}`

	// HTTPS with a client certificate: HTTP/2, and the API answers.
	resp, err := f.httpsClient(f.clientPair).Post(httpsBase+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("HTTPS with a client certificate: %v", err)
	}
	var cr server.CheckResponse
	json.NewDecoder(resp.Body).Decode(&cr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !cr.Allowed || resp.ProtoMajor != 2 {
		t.Fatalf("HTTPS: %s %s, allowed %v", resp.Proto, resp.Status, cr.Allowed)
	}
	// Refused: plain HTTP, no client certificate, a certificate from another CA.
	if resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body)); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest { // Go's answer to plain HTTP on a TLS port
			t.Fatalf("plain HTTP answered %s", resp.Status)
		}
	}
	for name, certs := range map[string][]tls.Certificate{"no client certificate": nil, "another CA's client certificate": {f.strangerPair}} {
		if resp, err := f.httpsClient(certs...).Get(httpsBase + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatalf("%s: answered %s, want a failed handshake", name, resp.Status)
		}
	}

	// gRPC over TLS with a client certificate.
	creds := credentials.NewTLS(&tls.Config{RootCAs: f.ca.Pool(), Certificates: []tls.Certificate{f.clientPair}})
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rr, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "demo", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "203.0.113.9")}})
	if err != nil || rr.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("gRPC over TLS: %v, %v", rr, err)
	}
	// Without a client certificate the handshake fails.
	bare, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: f.ca.Pool()})))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, err := rlsv3.NewRateLimitServiceClient(bare).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain: "demo", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "203.0.113.9")}}); err == nil {
		t.Fatal("gRPC without a client certificate was answered")
	}

	// sluice check over HTTPS with the CA and a client certificate; without the CA it fails.
	code, out, errOut := runCmd(t, "check", "--server", httpsBase, "--tls-ca", f.caFile, "--tls-cert", f.clientCert,
		"--tls-key", f.clientKey, "--policy", "demo", "--key", "203.0.113.10")
	if code != exitOK || !strings.Contains(out, `"allowed": true`) {
		t.Fatalf("check over TLS: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ := runCmd(t, "check", "--server", httpsBase, "--tls-cert", f.clientCert, "--tls-key", f.clientKey,
		"--policy", "demo", "--key", "203.0.113.10"); code != exitError {
		t.Fatalf("check without --tls-ca: exit %d, want %d (the server's CA is not trusted)", code, exitError)
	}

	// Rotation: a new certificate written over the files is served within a second or so;
	// a key that does not match its certificate (a rotation half done) keeps the old one.
	addr := strings.TrimPrefix(base, "http://")
	if cn := f.servedCN(t, addr); cn != "sluice v1" {
		t.Fatalf("served %q, want sluice v1", cn)
	}
	c2, k2 := f.ca.Server(t, "sluice v2")
	os.WriteFile(f.certFile, c2, 0o600) // the key is not written yet
	// Handshakes look at the files again once tlsRecheck has passed; the one that sees the
	// half-done rotation logs it. Until then, and after, the old certificate is served.
	poll.UntilDescribed(t, 5*time.Second, "the unusable rotation logged", func() bool {
		if cn := f.servedCN(t, addr); cn != "sluice v1" {
			t.Fatalf("halfway through a rotation served %q, want the previous certificate", cn)
		}
		return strings.Contains(logs.String(), "TLS files changed but cannot be used")
	}, logs.String)
	if cn := f.servedCN(t, addr); cn != "sluice v1" {
		t.Fatalf("after the half-done rotation was seen, served %q, want the previous certificate", cn)
	}
	os.WriteFile(f.keyFile, k2, 0o600)
	poll.Until(t, 5*time.Second, "the rotated certificate served", func() bool { return f.servedCN(t, addr) == "sluice v2" })
	if cn := f.servedCN(t, grpcAddr); cn != "sluice v2" {
		t.Fatalf("gRPC listener served %q after the rotation, want sluice v2", cn)
	}
}

// TestProxyTLS: the proxy's listener speaks TLS with --tls-cert and --tls-key.
func TestProxyTLS(t *testing.T) {
	f := newTLSFixture(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "upstream") }))
	defer up.Close()
	cfg := filepath.Join(f.dir, "p.yaml")
	os.WriteFile(cfg, []byte("policies:\n  - {name: per-ip, key: ip, algorithm: gcra, rate: 5, period: hour}\n"), 0o644)
	base := "https://" + startedProxy(t, "--upstream", up.URL, "--listen", "127.0.0.1:0", "--config", cfg,
		"--tls-cert", f.certFile, "--tls-key", f.keyFile)
	resp, err := f.httpsClient().Get(base + "/x")
	if err != nil {
		t.Fatalf("HTTPS through the proxy: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "upstream" || resp.Header.Get("RateLimit-Policy") == "" || resp.ProtoMajor != 2 {
		t.Fatalf("HTTPS through the proxy: %s %s %q, RateLimit-Policy %q", resp.Proto, resp.Status, b, resp.Header.Get("RateLimit-Policy"))
	}
}

// TestTLSFlagErrors: incomplete or unreadable TLS flags stop the command with a usage
// error that names the flag.
func TestTLSFlagErrors(t *testing.T) {
	f := newTLSFixture(t)
	junk := testcert.WriteFile(t, f.dir, "junk.pem", []byte("not a certificate"))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--tls-cert", f.certFile}, "--tls-cert and --tls-key go together"},
		{[]string{"serve", "--tls-client-ca", f.caFile}, "--tls-cert and --tls-key go together"},
		{[]string{"serve", "--tls-cert", f.certFile, "--tls-key", f.clientKey}, "--tls-key"},
		{[]string{"serve", "--tls-cert", f.certFile, "--tls-key", f.keyFile, "--tls-client-ca", junk}, "--tls-client-ca"},
		{[]string{"serve", "--tls-cert", filepath.Join(f.dir, "missing.pem"), "--tls-key", f.keyFile}, "missing.pem"},
		{[]string{"proxy", "--upstream", "http://127.0.0.1:1", "--tls-key", f.keyFile}, "--tls-cert and --tls-key go together"},
		{[]string{"check", "--policy", "p", "--key", "k", "--tls-ca", junk}, "--tls-ca"},
		{[]string{"check", "--policy", "p", "--key", "k", "--tls-cert", f.clientCert}, "--tls-cert and --tls-key go together"},
	} {
		args := append(tc.args, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0")
		if tc.args[0] != "serve" {
			args = tc.args
		}
		code, _, errOut := runCmd(t, args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d naming %q", tc.args, code, errOut, exitUsage, tc.want)
		}
	}
}
