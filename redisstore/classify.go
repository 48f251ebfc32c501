package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// failed returns err, a failure of a call to Redis made under ctx, as a sluice.StoreError
// of the kind classify gives it. A cancellation while ctx is live is another call's (a
// shared dial), and a store failure (store.ForeignCancel).
func failed(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	return store.ForeignCancel(ctx, storeError(err))
}

// storeError returns err as a sluice.StoreError of the kind classify gives it (err itself
// when it is one already); a misconfiguration's error is a ConfigError naming its cause.
func storeError(err error) error {
	if _, ok := errors.AsType[*sluice.StoreError](err); ok {
		return err
	}
	if c := misconfiguration(err); c != "" {
		return &sluice.StoreError{Kind: store.KindMisconfigured, Err: &ConfigError{Cause: c, Err: err}}
	}
	return &sluice.StoreError{Kind: classify(err), Err: err}
}

// Causes of a misconfiguration (ConfigError.Cause), each a metric label; causeHints says
// what each means.
const (
	CauseAuth     = "auth"     // credentials or ACL permissions refused
	CauseDatabase = "database" // no such database index
	CauseTLS      = "tls"      // the server's certificate does not verify
	CauseCluster  = "cluster"  // a cluster URL names a server without cluster support
	CauseSentinel = "sentinel" // not a Sentinel, or a master it does not monitor
	CauseCommand  = "command"  // the server lacks a command the store needs
)

// ConfigCauses lists every ConfigError.Cause.
var ConfigCauses = []string{CauseAuth, CauseDatabase, CauseTLS, CauseCluster, CauseSentinel, CauseCommand}

// causeHints say what to fix, per cause.
var causeHints = map[string]string{
	CauseAuth:     "check the user and password in the URL and the user's ACL permissions",
	CauseDatabase: "the URL's database index is not one this server has",
	CauseTLS:      "the server's certificate does not verify; name its CA with ca_file",
	CauseCluster:  "the URL names a cluster but the server has cluster support disabled",
	CauseSentinel: "the URL's master_set is not a master this Sentinel monitors, or the address is not a Sentinel",
	CauseCommand:  "the server does not know a command the store needs",
}

// ConfigError is an error retrying cannot fix: Redis refuses the store's connection
// settings. The store returns it inside a sluice.StoreError of store.KindMisconfigured.
type ConfigError struct {
	// Cause is one of ConfigCauses.
	Cause string
	// Err is Redis's (or the TLS handshake's) error.
	Err error
}

func (e *ConfigError) Error() string {
	return "Redis refuses the store's settings (" + e.Cause + ": " + causeHints[e.Cause] +
		"; retrying cannot fix it): " + e.Err.Error()
}

func (e *ConfigError) Unwrap() error { return e.Err }

// misconfiguration returns the cause (one of ConfigCauses) of err when it is an error
// retrying cannot fix, else "".
func misconfiguration(err error) string {
	if errors.As(err, new(*tls.CertificateVerificationError)) ||
		errors.As(err, new(x509.UnknownAuthorityError)) || errors.As(err, new(x509.HostnameError)) ||
		errors.As(err, new(x509.CertificateInvalidError)) {
		return CauseTLS
	}
	if ce, ok := errors.AsType[*ConfigError](err); ok {
		return ce.Cause
	}
	var cause string
	walk(err, func(e error) bool {
		cause = replyCause(e.Error())
		return cause == ""
	})
	return cause
}

// replyCause returns the cause of a Redis error reply that retrying cannot fix, else "".
func replyCause(msg string) string {
	has := func(subs ...string) bool {
		return slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(msg, sub) })
	}
	switch {
	case has("WRONGPASS", "NOAUTH", "NOPERM", "without any password configured"):
		return CauseAuth
	case has("DB index is out of range", "invalid DB index"):
		return CauseDatabase
	case has("cluster support disabled"):
		return CauseCluster
	case has("No such master with that name", "unknown command 'SENTINEL'"):
		return CauseSentinel
	case has("unknown command"):
		return CauseCommand
	}
	return ""
}

// redisCodes maps the first word of a Redis error reply to its Kind.
var redisCodes = map[string]sluice.ErrorKind{
	"BUSY":        store.KindBusy,
	"OOM":         store.KindOOM,
	"LOADING":     store.KindLoading,
	"READONLY":    store.KindReadOnly,
	"MASTERDOWN":  store.KindReadOnly,
	"CLUSTERDOWN": store.KindClusterDown,
	"MOVED":       store.KindRedirect,
	"ASK":         store.KindRedirect,
	"TRYAGAIN":    store.KindRedirect,
	"NOSCRIPT":    store.KindNoScript,
}

// classify returns the kind of an error of a call to Redis: a misconfiguration; a Redis
// error reply by its leading code (redisCodes), in the chain or quoted after ": "; network
// errors; rueidis's connection errors; context errors. Anything else is store.KindOther.
func classify(err error) sluice.ErrorKind {
	if err == nil {
		return ""
	}
	if k := sluice.KindOf(err); k == store.KindBadInput || k == store.KindClosed {
		return k
	}
	if misconfiguration(err) != "" {
		return store.KindMisconfigured
	}
	if k := redisKind(err); k != "" {
		return k
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return store.KindTimeout
	case errors.Is(err, context.Canceled):
		return store.KindCanceled
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		return store.KindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return store.KindReset
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return store.KindTimeout
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Op == "dial" {
		return store.KindRefused
	}
	msg := err.Error() // rueidis: "rueidis client is closing or unable to connect redis"
	if strings.Contains(msg, "unable to connect") || strings.Contains(msg, "connection refused") {
		return store.KindRefused
	}
	if strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") {
		return store.KindReset
	}
	return store.KindOther
}

// redisKind finds a Redis error code in err's chain.
func redisKind(err error) sluice.ErrorKind {
	var found sluice.ErrorKind
	walk(err, func(e error) bool {
		found = codeKind(e.Error())
		return found == ""
	})
	msg := err.Error() // a reply formatted into the message with %v
	for i := strings.Index(msg, ": "); found == "" && i >= 0; i = strings.Index(msg, ": ") {
		msg = msg[i+2:]
		found = codeKind(msg)
	}
	return found
}

// codeKind returns the Kind of a message that starts with a Redis error code.
func codeKind(msg string) sluice.ErrorKind {
	code, _, _ := strings.Cut(msg, " ")
	return redisCodes[code]
}

// walk calls f on err and every error in its chain, depth first, until f returns false.
func walk(err error, f func(error) bool) bool {
	for err != nil {
		if !f(err) {
			return false
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if !walk(e, f) {
					return false
				}
			}
			return true
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return true
		}
	}
	return true
}
