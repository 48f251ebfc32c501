package failover

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/sluicehq/sluice"
)

// Kind classifies an error returned by a store. It is a short snake_case word, suitable
// as a metric label.
type Kind string

// Kinds of store failures: the store could not decide, and the failure mode applies.
const (
	// KindTimeout: the decision's deadline passed (the store or the network is slow, or
	// the server is frozen), or a network timeout.
	KindTimeout Kind = "timeout"
	// KindRefused: the connection was refused or could not be made (the server is down).
	KindRefused Kind = "refused"
	// KindReset: the connection was reset or closed under the request.
	KindReset Kind = "reset"
	// KindBusy: BUSY, the server is running a long script.
	KindBusy Kind = "busy"
	// KindOOM: OOM, the server is at maxmemory and refuses writes.
	KindOOM Kind = "oom"
	// KindLoading: LOADING, the server is loading its dataset.
	KindLoading Kind = "loading"
	// KindReadOnly: READONLY or MASTERDOWN, the node is (or follows) a replica that
	// cannot take writes, typically during a failover.
	KindReadOnly Kind = "readonly"
	// KindClusterDown: CLUSTERDOWN, the cluster cannot serve the slot.
	KindClusterDown Kind = "clusterdown"
	// KindRedirect: MOVED, ASK or TRYAGAIN reached the caller. A cluster client follows
	// redirections itself, so one that surfaces means they did not settle (a resharding
	// storm or a stale topology).
	KindRedirect Kind = "redirect"
	// KindNoScript: NOSCRIPT reached the caller, that is, the store could not reload its
	// script.
	KindNoScript Kind = "noscript"
	// KindBreakerOpen: the store was not called because the circuit breaker is open (or
	// half-open with its probes already in flight).
	KindBreakerOpen Kind = "breaker_open"
	// KindOverload: the store was not called because too many earlier calls are still
	// running past their deadline (see WithMaxPending).
	KindOverload Kind = "overload"
	// KindOther: any other error from the store (a script error, an unexpected reply).
	// The store could not decide, so it is a failure too.
	KindOther Kind = "other"
)

// Kinds of errors that are not store failures: they are returned to the caller as they
// are, never decided by the failure mode and never counted by the circuit breaker.
const (
	// KindBadInput: the caller's input is invalid (sluice.IsBadInput).
	KindBadInput Kind = "bad_input"
	// KindNotAtomic: the store cannot decide the batch atomically (sluice.ErrNotAtomic).
	KindNotAtomic Kind = "not_atomic"
	// KindCanceled: the caller's context ended before the store answered.
	KindCanceled Kind = "canceled"
	// KindClosed: the limiter or the store has been closed (sluice.ErrClosed).
	KindClosed Kind = "closed"
)

// IsFailure reports whether k is a store failure, to which the failure mode applies.
func (k Kind) IsFailure() bool {
	switch k {
	case "", KindBadInput, KindNotAtomic, KindCanceled, KindClosed:
		return false
	}
	return true
}

// ErrBreakerOpen is the cause recorded for decisions made without calling the store
// because the circuit breaker is open.
var ErrBreakerOpen = errors.New("failover: circuit breaker open")

// ErrDeadline is the cause recorded for decisions whose store call did not answer within
// the deadline.
var ErrDeadline = errors.New("failover: store deadline exceeded")

// ErrOverload is the cause recorded for decisions made without calling the store because
// too many calls are pending (see WithMaxPending).
var ErrOverload = errors.New("failover: too many pending store calls")

// redisCodes maps the first word of a Redis error reply to its Kind.
var redisCodes = map[string]Kind{
	"BUSY":        KindBusy,
	"OOM":         KindOOM,
	"LOADING":     KindLoading,
	"READONLY":    KindReadOnly,
	"MASTERDOWN":  KindReadOnly,
	"CLUSTERDOWN": KindClusterDown,
	"MOVED":       KindRedirect,
	"ASK":         KindRedirect,
	"TRYAGAIN":    KindRedirect,
	"NOSCRIPT":    KindNoScript,
}

// Classify returns the Kind of err, "" for nil.
//
// It works on any store: it walks err's chain (errors.Unwrap, including joined errors)
// and recognises the sentinel errors of package sluice and this package, context errors,
// network errors (timeouts, refused, reset, EOF), and Redis error replies by their
// leading code (BUSY, OOM, LOADING, READONLY, MASTERDOWN, CLUSTERDOWN, MOVED, ASK,
// TRYAGAIN, NOSCRIPT), whether the reply is an error of its own in the chain or quoted in
// a message after ": ". Anything else is KindOther.
//
// context.DeadlineExceeded is KindTimeout and context.Canceled KindCanceled; the limiter
// tells a caller's own deadline from the store's slowness before classifying.
func Classify(err error) Kind {
	if err == nil {
		return ""
	}
	switch {
	case sluice.IsBadInput(err):
		return KindBadInput
	case errors.Is(err, sluice.ErrNotAtomic):
		return KindNotAtomic
	case errors.Is(err, sluice.ErrClosed):
		return KindClosed
	case errors.Is(err, ErrBreakerOpen):
		return KindBreakerOpen
	case errors.Is(err, ErrOverload):
		return KindOverload
	}
	// A Redis reply is the most specific information: look for it first, as a store may
	// wrap it in a context or network error and vice versa.
	if k := redisKind(err); k != "" {
		return k
	}
	switch {
	case errors.Is(err, ErrDeadline), errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCanceled
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EADDRNOTAVAIL):
		return KindRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return KindReset
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return KindTimeout
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return KindRefused
	}
	// Clients that report connection loss with their own error values (rueidis:
	// "rueidis client is closing or unable to connect redis").
	msg := err.Error()
	if strings.Contains(msg, "unable to connect") || strings.Contains(msg, "connection refused") {
		return KindRefused
	}
	if strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe") {
		return KindReset
	}
	return KindOther
}

// redisKind finds a Redis error code in err's chain.
func redisKind(err error) Kind {
	var found Kind
	walk(err, func(e error) bool {
		msg := e.Error()
		if k := codeKind(msg); k != "" {
			found = k
			return false
		}
		return true
	})
	if found != "" {
		return found
	}
	// A store that formatted the reply into its message with %v rather than %w.
	msg := err.Error()
	for i := strings.Index(msg, ": "); i >= 0; {
		msg = msg[i+2:]
		if k := codeKind(msg); k != "" {
			return k
		}
		i = strings.Index(msg, ": ")
	}
	return ""
}

// codeKind returns the Kind of a message that starts with a Redis error code.
func codeKind(msg string) Kind {
	end := strings.IndexByte(msg, ' ')
	if end < 0 {
		end = len(msg)
	}
	return redisCodes[msg[:end]]
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
