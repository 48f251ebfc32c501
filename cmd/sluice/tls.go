package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/urfave/cli/v3"
)

// listenTLSFlags are the TLS flags of serve's and proxy's listeners.
func listenTLSFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", Usage: "serve TLS with the certificate (chain) in this PEM `FILE`; with --tls-key. Re-read when it changes, so a rotated certificate is served without a restart", Sources: cli.EnvVars("SLUICE_TLS_CERT")},
		&cli.StringFlag{Name: "tls-key", Usage: "the private key of --tls-cert, a PEM `FILE`", Sources: cli.EnvVars("SLUICE_TLS_KEY")},
		&cli.StringFlag{Name: "tls-client-ca", Usage: "require every client to present a certificate issued by a CA in this PEM `FILE` (mutual TLS); re-read when it changes", Sources: cli.EnvVars("SLUICE_TLS_CLIENT_CA")},
	}
}

// tlsRecheck is how often, at most, the files are looked at again for changes.
const tlsRecheck = time.Second

// tlsFiles is a listener's TLS configuration read from PEM files: a certificate and key,
// and optionally the CAs that client certificates must chain to. During a handshake the
// files are looked at again (size and modification time) at most every tlsRecheck and
// read again when they changed; a change that cannot be used is logged, and the files in
// force stay in force.
type tlsFiles struct {
	certFile, keyFile, caFile string
	log                       *slog.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   string // what the files looked like when last read
	cert    *tls.Certificate
	pool    *x509.CertPool
}

// readTLSFlags returns the TLS configuration the flags ask for, or nil when there is none.
// It reads the files once, so that a missing or malformed one stops the command.
func readTLSFlags(c *cli.Command, log *slog.Logger) (*tls.Config, error) {
	f := &tlsFiles{certFile: c.String("tls-cert"), keyFile: c.String("tls-key"), caFile: c.String("tls-client-ca"), log: log}
	switch {
	case f.certFile == "" && f.keyFile == "" && f.caFile == "":
		return nil, nil
	case f.certFile == "" || f.keyFile == "":
		return nil, cli.Exit("--tls-cert and --tls-key go together", exitUsage)
	}
	if err := f.load(f.look()); err != nil {
		return nil, cli.Exit(err.Error(), exitUsage)
	}
	return f.config(), nil
}

// config returns the tls.Config serving f's files.
func (f *tlsFiles) config() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			cert, _ := f.current()
			return cert, nil
		},
	}
	if f.caFile != "" {
		// ClientCAs is fixed; verifyClient follows the CA file.
		cfg.ClientAuth = tls.RequireAnyClientCert
		cfg.VerifyConnection = f.verifyClient
	}
	return cfg
}

func (f *tlsFiles) verifyClient(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: client certificate required")
	}
	_, pool := f.current()
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return err
}

// current returns the certificate and client CA pool in force, reading the files again
// first if they changed.
func (f *tlsFiles) current() (*tls.Certificate, *x509.CertPool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now := time.Now(); now.Sub(f.checked) >= tlsRecheck {
		f.checked = now
		if st := f.look(); st != f.stamp {
			if err := f.load(st); err != nil {
				f.log.Warn("TLS files changed but cannot be used; the previous ones stay in force", slog.String("error", err.Error()))
			} else {
				f.log.Info("TLS files reloaded", slog.String("cert", f.certFile))
			}
		}
	}
	return f.cert, f.pool
}

// look describes the files' sizes and modification times (following symlinks).
func (f *tlsFiles) look() string {
	var s string
	for _, name := range []string{f.certFile, f.keyFile, f.caFile} {
		if name == "" {
			continue
		}
		if fi, err := os.Stat(name); err == nil {
			s += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			s += "missing;"
		}
	}
	return s
}

// load reads the files; stamp is what they looked like just before.
func (f *tlsFiles) load(stamp string) error {
	cert, err := loadKeyPair(f.certFile, f.keyFile)
	if err != nil {
		return err
	}
	var pool *x509.CertPool
	if f.caFile != "" {
		if pool, err = loadCAs("--tls-client-ca", f.caFile); err != nil {
			return err
		}
	}
	f.cert, f.pool, f.stamp = &cert, pool, stamp
	return nil
}

// loadKeyPair reads the certificate (chain) and key that --tls-cert and --tls-key name.
func loadKeyPair(certFile, keyFile string) (c tls.Certificate, err error) {
	if c, err = tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		err = fmt.Errorf("--tls-cert %s, --tls-key %s: %w", certFile, keyFile, err)
	}
	return c, err
}

// loadCAs reads the PEM file of CA certificates that flag names.
func loadCAs(flag, file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", flag, file)
	}
	return pool, nil
}
