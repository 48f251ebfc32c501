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
func (m FailureMode) String() string { return enumName(failureModeNames[:], m, "failure_mode") }

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

// BreakerState is the state of a circuit breaker in front of a store, as a decorator
// that has one reports it (Report.Breaker). The zero value means no breaker took part;
// package store names the states.
type BreakerState uint8

var breakerNames = [...]string{"none", "closed", "half_open", "open"}

// String returns "closed", "half_open", "open" or "none".
func (s BreakerState) String() string { return enumName(breakerNames[:], s, "breaker") }

// ErrorKind classifies an error a Limiter returned or a failure mode absorbed. It is a
// short snake_case word, suitable as a metric label: "bad_input", "canceled" and "closed"
// for errors that are not store failures, and for store failures the class the store gave
// them (see [StoreError]), such as "timeout", "refused" or "busy". Package store names
// the kinds.
type ErrorKind string

// The kinds KindOf gives without a StoreError; package store exports them.
const (
	kindBadInput ErrorKind = "bad_input"
	kindClosed   ErrorKind = "closed"
	kindCanceled ErrorKind = "canceled"
	kindTimeout  ErrorKind = "timeout"
	kindOther    ErrorKind = "other"
)

// StoreError is a store failure as the store classified it. Stores return their
// failures wrapped in one, so that the layers above read the class (KindOf) without
// knowing the store's client or protocol.
type StoreError struct {
	Kind ErrorKind
	Err  error
}

func (e *StoreError) Error() string { return e.Err.Error() }
func (e *StoreError) Unwrap() error { return e.Err }

// KindOf returns the class of err: "" for nil; "bad_input" for an error wrapping one of
// the sentinel errors of bad input ([ErrInvalidLimit], [ErrInvalidCost],
// [ErrCostExceedsLimit], [ErrInvalidKey], [ErrInvalidLease], [ErrUnknownReservation],
// [ErrSettled]); "closed" for [ErrClosed]; the Kind of the outermost [StoreError] in err's
// chain; "timeout" and "canceled" for context errors; else "other".
func KindOf(err error) ErrorKind {
	if err == nil {
		return ""
	}
	switch {
	case isBadInput(err):
		return kindBadInput
	case errors.Is(err, ErrClosed):
		return kindClosed
	}
	if se, ok := errors.AsType[*StoreError](err); ok && se.Kind != "" {
		return se.Kind
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return kindTimeout
	case errors.Is(err, context.Canceled):
		return kindCanceled
	}
	return kindOther
}
