package sluice

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// FailureMode says how a limit is decided when its store cannot decide it. The zero
// value, FailInherit, chooses nothing: the next rule decides (a policy inherits its
// configuration's default, which inherits the service's, which defaults to FailOpen).
type FailureMode uint8

const (
	// FailInherit takes the mode of the next rule. It is the zero FailureMode.
	FailInherit FailureMode = iota
	// FailOpen allows the request without consulting any state: the Decision has Path
	// PathOpen, Allowed true and zero counts (they are unknown).
	FailOpen
	// FailClosed denies the request without consulting any state: the Decision has Path
	// PathClosed, and the error wraps ErrStoreUnavailable, so that front ends answer 503
	// rather than 429.
	FailClosed
	// FailLocal decides with an in-process limiter under a share of the limit (see
	// Failure.Share): Path PathLocal, and Decision.Limit is the share that was applied.
	FailLocal

	numFailureModes
)

var failureModeNames = [numFailureModes]string{"inherit", "open", "closed", "local"}

// String returns "open", "closed", "local" or "inherit".
func (m FailureMode) String() string {
	if m < numFailureModes {
		return failureModeNames[m]
	}
	return fmt.Sprintf("failure_mode(%d)", uint8(m))
}

// Path returns the Path of a decision made in mode m (PathStore for FailInherit).
func (m FailureMode) Path() Path {
	switch m {
	case FailOpen:
		return PathOpen
	case FailClosed:
		return PathClosed
	case FailLocal:
		return PathLocal
	}
	return PathStore
}

// Strictness orders the modes for a request whose limits name different ones: closed,
// then local, then open (a batch fails as its strictest limit says). FailInherit is 0.
func (m FailureMode) Strictness() int {
	switch m {
	case FailClosed:
		return 3
	case FailLocal:
		return 2
	case FailOpen:
		return 1
	}
	return 0
}

// ParseFailureMode parses "open", "closed" or "local", case-insensitive ("fail_open",
// "fail-open" and "close" are accepted too). The empty string and "inherit" are
// FailInherit.
func ParseFailureMode(s string) (FailureMode, error) {
	norm := strings.ToLower(strings.TrimSpace(s))
	norm = strings.TrimPrefix(strings.TrimPrefix(norm, "fail_"), "fail-")
	switch norm {
	case "", "inherit":
		return FailInherit, nil
	case "open":
		return FailOpen, nil
	case "closed", "close":
		return FailClosed, nil
	case "local":
		return FailLocal, nil
	}
	return FailInherit, fmt.Errorf("unknown failure mode %q (want open, closed or local)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (m FailureMode) MarshalText() ([]byte, error) {
	if m >= numFailureModes {
		return nil, fmt.Errorf("sluice: unknown failure mode %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *FailureMode) UnmarshalText(b []byte) error {
	v, err := ParseFailureMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Failure is how one limit is decided when its store cannot decide it. Each field left
// zero is taken from the next rule (the failover decorator's defaults).
type Failure struct {
	// Mode is the failure mode; FailInherit defers to the next rule.
	Mode FailureMode
	// Share is the share of the limit the in-process limiter gets in FailLocal mode, in
	// (0, 1]: typically 1/N for N nodes sharing the store, so that the fleet stays within
	// the limit while the store is away. 0 defers to the next rule; values outside (0, 1]
	// are treated as 0. It is taken as parts per million of the limit, rounded to the
	// nearest, and the limit's Rate and Burst are scaled in integers, rounded down, at
	// least 1.
	Share float64
}

// Or fills f's unset fields from g.
func (f Failure) Or(g Failure) Failure {
	if f.Mode == FailInherit || f.Mode >= numFailureModes {
		f.Mode = g.Mode
	}
	if !(f.Share > 0 && f.Share <= 1) {
		f.Share = g.Share
	}
	return f
}

// BreakerState is the state of a circuit breaker in front of a store.
type BreakerState uint8

const (
	// BreakerNone: no breaker took part. The zero value.
	BreakerNone BreakerState = iota
	// BreakerClosed: the store is called for every decision.
	BreakerClosed
	// BreakerHalfOpen: a few probe calls go to the store; the other decisions use the
	// failure mode. Enough successful probes close the breaker, a failed one opens it.
	BreakerHalfOpen
	// BreakerOpen: the store is not called; every decision uses the failure mode.
	BreakerOpen
)

var breakerNames = [...]string{"none", "closed", "half_open", "open"}

// String returns "closed", "half_open", "open" or "none".
func (s BreakerState) String() string {
	if int(s) < len(breakerNames) {
		return breakerNames[s]
	}
	return fmt.Sprintf("breaker(%d)", uint8(s))
}

// ErrorKind classifies an error a Limiter returned or a failure mode absorbed. It is a
// short snake_case word, suitable as a metric label. Stores classify their own errors
// (see StoreError); KindOf reads the class.
type ErrorKind string

// Kinds of store failures: the store could not decide, and the failure mode applies.
const (
	// KindTimeout: the decision's deadline passed (the store or the network is slow, or
	// the server is frozen), or a network timeout.
	KindTimeout ErrorKind = "timeout"
	// KindRefused: the connection was refused or could not be made (the server is down,
	// or a connection attempt shared with another call ended with that call: see
	// ForeignCancel).
	KindRefused ErrorKind = "refused"
	// KindReset: the connection was reset or closed under the request.
	KindReset ErrorKind = "reset"
	// KindBusy: the server is busy (a Redis running a long script).
	KindBusy ErrorKind = "busy"
	// KindOOM: the server is out of memory and refuses writes.
	KindOOM ErrorKind = "oom"
	// KindLoading: the server is loading its dataset.
	KindLoading ErrorKind = "loading"
	// KindReadOnly: the node is (or follows) a replica that cannot take writes,
	// typically during a failover.
	KindReadOnly ErrorKind = "readonly"
	// KindClusterDown: the cluster cannot serve the slot.
	KindClusterDown ErrorKind = "clusterdown"
	// KindRedirect: a cluster redirection did not settle (a resharding storm or a stale
	// topology).
	KindRedirect ErrorKind = "redirect"
	// KindNoScript: the store's script was missing and could not be loaded again.
	KindNoScript ErrorKind = "noscript"
	// KindBreakerOpen: the store was not called because the circuit breaker is open.
	KindBreakerOpen ErrorKind = "breaker_open"
	// KindOverload: the store was not called because too many earlier calls are still
	// running past their deadline.
	KindOverload ErrorKind = "overload"
	// KindMisconfigured: the store refuses the connection's settings (credentials or
	// permissions, a database it does not have, a certificate that does not verify, a
	// cluster or Sentinel address of a server that is not one). Retrying cannot fix it:
	// the operator must. The failure mode applies meanwhile.
	KindMisconfigured ErrorKind = "misconfigured"
	// KindOther: any other failure of the store (a script error, an unexpected reply).
	KindOther ErrorKind = "other"
)

// Kinds of errors that are not store failures: they are returned as they are, never
// decided by a failure mode and never counted by a circuit breaker.
const (
	// KindBadInput: the caller's input is invalid (IsBadInput).
	KindBadInput ErrorKind = "bad_input"
	// KindCanceled: the caller's context ended before the store answered.
	KindCanceled ErrorKind = "canceled"
	// KindClosed: the limiter or the store has been closed (ErrClosed).
	KindClosed ErrorKind = "closed"
)

// IsFailure reports whether k is a store failure, to which the failure mode applies.
func (k ErrorKind) IsFailure() bool {
	switch k {
	case "", KindBadInput, KindCanceled, KindClosed:
		return false
	}
	return true
}

// StoreError is a store failure as the store classified it. Stores return their
// failures wrapped in one, so that the layers above read the class (KindOf) without
// knowing the store's client or protocol.
type StoreError struct {
	Kind ErrorKind
	Err  error
}

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// KindOf returns the class of err: "" for nil; the class of bad input,
// ErrClosed and context errors; the Kind of the outermost StoreError in err's chain;
// else KindOther.
func KindOf(err error) ErrorKind {
	if err == nil {
		return ""
	}
	switch {
	case IsBadInput(err):
		return KindBadInput
	case errors.Is(err, ErrClosed):
		return KindClosed
	}
	var se *StoreError
	if errors.As(err, &se) && se.Kind != "" {
		return se.Kind
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, context.Canceled):
		return KindCanceled
	}
	return KindOther
}

// ForeignCancel returns err, the error of a store call made under ctx, as a store failure
// when it reads as a cancellation (KindOf(err) is KindCanceled) while ctx is live. That
// cancellation is not the caller's: another call that shared work with this one (a
// connection being dialled, a batch) ended, and took this call down with it, so the store
// could not serve it. The result is a *StoreError of KindRefused that no longer matches
// context.Canceled, so that no layer above mistakes it for its caller leaving. Any other
// err, nil included, is returned as it is.
func ForeignCancel(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || KindOf(err) != KindCanceled {
		return err
	}
	return &StoreError{Kind: KindRefused, Err: foreignCancel{err}}
}

// foreignCancel is a cancellation that reached a call whose context is live. It keeps
// the cancellation's message but not its chain.
type foreignCancel struct{ err error }

func (e foreignCancel) Error() string {
	return e.err.Error() + " (another call's cancellation; this call's context is live)"
}
