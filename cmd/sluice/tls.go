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

// tlsFiles is a TLS configuration read from PEM files: a certificate and key, and CAs
// (a listener's for client certificates, a client's for servers). During a listener's
// handshake the files are looked at again (size and modification time) at most every
// tlsRecheck and read again when they changed; a change that cannot be used is logged, and
// the files in force stay in force.
type tlsFiles struct {
	certFile, keyFile, caFile string
	caFlag                    string // the flag that names caFile: "--tls-client-ca"
	log                       *slog.Logger

	mu      sync.Mutex
	checked time.Time
	stamp   string           // what the files looked like when last read
	cert    *tls.Certificate // nil without --tls-cert
	pool    *x509.CertPool
}

// readTLSFiles reads the files that --tls-cert, --tls-key and --caFlag name, or returns
// nil when none is named. --tls-cert and --tls-key go together; needCert requires them.
// It reads the files once, so that a missing or malformed one stops the command.
func readTLSFiles(c *cli.Command, caFlag string, needCert bool) (*tlsFiles, error) {
	f := &tlsFiles{certFile: c.String("tls-cert"), keyFile: c.String("tls-key"),
		caFile: c.String(caFlag), caFlag: "--" + caFlag}
	switch {
	case f.certFile == "" && f.keyFile == "" && f.caFile == "":
		return nil, nil
	case (f.certFile == "") != (f.keyFile == "") || needCert && f.certFile == "":
		return nil, cli.Exit("--tls-cert and --tls-key go together", exitUsage)
	}
	if err := f.load(f.look()); err != nil {
		return nil, cli.Exit(err.Error(), exitUsage)
	}
	return f, nil
}

// listenerTLS returns the TLS configuration of serve's and proxy's listeners that the
// flags ask for, or nil when there is none.
func listenerTLS(c *cli.Command, log *slog.Logger) (*tls.Config, error) {
	f, err := readTLSFiles(c, "tls-client-ca", true)
	if f == nil {
		return nil, err
	}
	f.log = log
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
	return cfg, nil
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
	var cert *tls.Certificate
	if f.certFile != "" {
		kp, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
		if err != nil {
			return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", f.certFile, f.keyFile, err)
		}
		cert = &kp
	}
	var pool *x509.CertPool
	if f.caFile != "" {
		b, err := os.ReadFile(f.caFile)
		if err != nil {
			return fmt.Errorf("%s: %w", f.caFlag, err)
		}
		if pool = x509.NewCertPool(); !pool.AppendCertsFromPEM(b) {
			return fmt.Errorf("%s %s: no PEM certificate in it", f.caFlag, f.caFile)
		}
	}
	f.cert, f.pool, f.stamp = cert, pool, stamp
	return nil
}
