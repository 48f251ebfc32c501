package redisstore

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

func decideOnce(t *testing.T, s *Store) {
	t.Helper()
	d, err := s.AllowN(context.Background(), "conn:1", sluice.PerSecond(5), 1)
	if err != nil || !d.Allowed {
		t.Fatalf("decision: %+v, %v", d, err)
	}
}

func TestOpenACL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t,
		redistest.WithConfig("user", "default", "off"),
		redistest.WithConfig("user", "limiter", "on", ">s3cret", "~sluice:*", "+@all"))
	decideOnce(t, open(t, "redis://limiter:s3cret@"+srv.Addr()))
	for _, url := range []string{"redis://limiter:wrong@" + srv.Addr(), "redis://" + srv.Addr()} {
		s, err := Open(url)
		if err == nil {
			// The connection may be refused at the first command instead of at Open.
			_, err = s.AllowN(context.Background(), "conn:1", sluice.PerSecond(5), 1)
			s.Close()
		}
		if err == nil {
			t.Errorf("%s: decided without valid credentials", url)
		}
	}
}

func TestOpenSentinel(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t)
	sentinel := redistest.StartSentinel(t, primary, "limits")
	s := open(t, "redis://"+sentinel.Addr()+"?master_set=limits")
	decideOnce(t, s)
	if primary.MustDo("EXISTS", s.Key("conn:1", sluice.PerSecond(5))) != "1" {
		t.Error("the decision did not reach the primary named by Sentinel")
	}
}

// TestOpenSentinels: the multi-sentinel URL form (addr= for the other sentinels), with
// the first sentinel named already gone: the client asks the next.
func TestOpenSentinels(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t)
	gone := redistest.StartSentinel(t, primary, "limits")
	alive := redistest.StartSentinel(t, primary, "limits")
	url := "redis://" + gone.Addr() + "?addr=" + alive.Addr() + "&master_set=limits"
	gone.Kill()
	s := open(t, url)
	decideOnce(t, s)
	if primary.MustDo("EXISTS", s.Key("conn:1", sluice.PerSecond(5))) != "1" {
		t.Error("the decision did not reach the primary named by the live sentinel")
	}
}

func TestOpenCluster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t)
	// One seed is enough: the client discovers the other nodes.
	s := open(t, "redis://"+c.Addrs()[1])
	if !s.conn.Load().cluster {
		t.Fatal("cluster not detected from a single seed")
	}
	decideOnce(t, s)
	// The script is loaded on every primary at start.
	for _, n := range c.Nodes {
		poll.Until(t, 5*time.Second, "the script loaded on "+n.Addr(), func() bool { return n.MustDo("SCRIPT", "EXISTS", decideScript.sha) == "1" })
	}
	// SCRIPT FLUSH on every node: decisions heal it.
	for _, n := range c.Nodes {
		n.MustDo("SCRIPT", "FLUSH")
	}
	for i := 0; i < 20; i++ {
		if _, err := s.AllowN(context.Background(), "flushed:"+strconv.Itoa(i), sluice.PerSecond(5), 1); err != nil {
			t.Fatalf("after SCRIPT FLUSH: %v", err)
		}
	}
}

func TestOpenTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cert, key := writeSelfSigned(t, dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	redistest.Start(t,
		redistest.WithConfig("tls-port", port),
		redistest.WithConfig("tls-cert-file", cert),
		redistest.WithConfig("tls-key-file", key),
		redistest.WithConfig("tls-ca-cert-file", cert),
		redistest.WithConfig("tls-auth-clients", "no"))
	decideOnce(t, open(t, "rediss://127.0.0.1:"+port+"?skip_verify=true"))
	// A private CA: the server's certificate verifies against ca_file, without skip_verify.
	decideOnce(t, open(t, "rediss://127.0.0.1:"+port+"?ca_file="+url.QueryEscape(cert)+"&dial_timeout=2s"))
	if _, err := Open("rediss://127.0.0.1:" + port); err == nil {
		t.Error("the self-signed certificate verified against the system's roots")
	}
	for _, u := range []string{"redis://127.0.0.1:" + port + "?ca_file=" + cert, "rediss://127.0.0.1:" + port + "?ca_file=/nonexistent", "rediss://127.0.0.1:" + port + "?ca_file=" + key} {
		if _, err := Open(u); err == nil {
			t.Errorf("Open(%s) succeeded", u)
		}
	}
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// syncBuffer is a log sink safe for the store's background goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestEvictionPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		opts       []redistest.Option
		policy     string
		warn       bool
		unreadable bool
	}{
		{"noeviction", []redistest.Option{redistest.WithConfig("maxmemory-policy", "noeviction")}, "noeviction", false, false},
		{"allkeys-lru", []redistest.Option{redistest.WithConfig("maxmemory-policy", "allkeys-lru")}, "allkeys-lru", true, false},
		{"volatile-ttl", []redistest.Option{redistest.WithConfig("maxmemory-policy", "volatile-ttl")}, "volatile-ttl", true, false},
		// Managed Redis often refuses CONFIG: tolerated, and decisions still work.
		{"CONFIG refused", []redistest.Option{redistest.WithConfig("rename-command", "CONFIG", "")}, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, tt.opts...)
			var logs syncBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			s := open(t, srv.URL(), WithLogger(logger))
			policy, err := s.CheckEviction(context.Background())
			if tt.unreadable != (err != nil) || policy != tt.policy {
				t.Errorf("CheckEviction = %q, %v; want %q (error: %v)", policy, err, tt.policy, tt.unreadable)
			}
			if got := strings.Contains(logs.String(), "level=WARN"); got != tt.warn {
				t.Errorf("warning logged: %v, want %v; log:\n%s", got, tt.warn, logs.String())
			}
			if tt.unreadable && !strings.Contains(logs.String(), "cannot read maxmemory-policy") {
				t.Errorf("refused CONFIG not logged:\n%s", logs.String())
			}
			decideOnce(t, s)
		})
	}
}

func TestEvictedKeys(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithConfig("maxmemory", "4mb"), redistest.WithConfig("maxmemory-policy", "allkeys-random"))
	s := open(t, srv.URL(), WithLogger(slog.New(slog.NewTextHandler(&syncBuffer{}, nil))))
	ctx := context.Background()
	before, err := s.EvictedKeys(ctx)
	if err != nil || before != 0 {
		t.Fatalf("EvictedKeys at start = %d, %v; want 0", before, err)
	}
	big := strings.Repeat("x", 64<<10)
	for i := 0; i < 200; i++ {
		srv.MustDo("SET", "junk:"+strconv.Itoa(i), big)
	}
	after, err := s.EvictedKeys(ctx)
	if err != nil || after <= before {
		t.Errorf("EvictedKeys after filling 12 MiB into 4 MiB = %d, %v; want growth", after, err)
	}
}

// TestConnectRetry: with WithConnectRetry, Open succeeds while Redis is down; decisions
// fail at once with an error wrapping ErrNotConnected and the refused connection; once
// Redis is up the store connects by itself and decides. Without the option Open fails.
func TestConnectRetry(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Kill()

	if s, err := Open(srv.URL()); err == nil {
		s.Close()
		t.Fatal("Open without WithConnectRetry succeeded with Redis down")
	}

	s, err := Open(srv.URL(), WithConnectRetry())
	if err != nil {
		t.Fatalf("Open with WithConnectRetry: %v", err)
	}
	defer s.Close()
	if s.Client() != nil {
		t.Error("Client() is not nil before the store connected")
	}
	ctx := context.Background()
	start := time.Now()
	_, err = s.AllowN(ctx, "k", sluice.PerSecond(5), 1)
	if !errors.Is(err, ErrNotConnected) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("decision while Redis is down: %v, want ErrNotConnected wrapping ECONNREFUSED", err)
	}
	if _, err := sluice.AllowMulti(ctx, s, []sluice.Request{{Key: "k", Limit: sluice.PerSecond(5), N: 1}}); !errors.Is(err, ErrNotConnected) {
		t.Errorf("AllowMulti while Redis is down: %v", err)
	}
	if err := s.Reset(ctx, "k", sluice.PerSecond(5)); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Reset while Redis is down: %v", err)
	}
	if _, err := s.Reserve(ctx, "k", sluice.PerSecond(5), 1); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Reserve while Redis is down: %v", err)
	}
	if _, err := s.EvictedKeys(ctx); !errors.Is(err, ErrNotConnected) {
		t.Errorf("EvictedKeys while Redis is down: %v", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Ping while Redis is down: %v, want ErrNotConnected", err)
	}
	// A real fault (a killed Redis): refused at once, not after a connect attempt; 1s of
	// slack is scheduling on busy cores.
	if d := time.Since(start); d > time.Second {
		t.Errorf("failing decisions took %v: they must not wait for Redis", d)
	}

	srv.Restart()
	poll.Until(t, 15*time.Second, "the store connected after Redis started", func() bool {
		d, err := s.AllowN(ctx, "k", sluice.PerSecond(5), 1)
		if err == nil {
			if !d.Allowed || d.Remaining != 4 {
				t.Fatalf("first decision after connecting: %+v", d)
			}
			return true
		}
		if !errors.Is(err, ErrNotConnected) {
			t.Fatalf("decision while connecting: %v", err)
		}
		return false
	})
	if s.Client() == nil {
		t.Error("Client() is nil after connecting")
	}
	if err := s.Ping(ctx); err != nil {
		t.Errorf("Ping after connecting: %v", err)
	}
}

// TestConnectRetryCloseWhileConnecting: Close stops the connect loop at once.
func TestConnectRetryCloseWhileConnecting(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	srv.Kill()
	s, err := Open(srv.URL(), WithConnectRetry())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // real fault: a few connect attempts on a stopped Redis
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// A real fault (a killed Redis): Close does not wait out the connect loop's backoff
	// (up to 5s); 1s of slack is scheduling on busy cores.
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v while connecting", d)
	}
	if _, err := s.AllowN(context.Background(), "k", sluice.PerSecond(5), 1); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("decision after Close: %v, want ErrClosed", err)
	}
}

// TestHzHint: a Redis at the default hz 10 gets an info line advising hz 100; one at hz
// 100 does not.
func TestHzHint(t *testing.T) {
	t.Parallel()
	for _, hz := range []string{"10", "100"} {
		t.Run("hz="+hz, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, redistest.WithConfig("hz", hz))
			var logs syncBuffer
			s := open(t, srv.URL(), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			s.checkHz(context.Background())
			got := strings.Contains(logs.String(), "hz 100 lowers")
			if got != (hz == "10") {
				t.Errorf("hz %s: hint logged %v; log:\n%s", hz, got, logs.String())
			}
		})
	}
}
