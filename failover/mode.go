package failover

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice"
)

// Mode says how a decision is made when the store cannot make it.
type Mode uint8

const (
	// Unset chooses no mode: the next rule decides (see Fallback). It is the zero Mode.
	Unset Mode = iota
	// FailOpen allows the request without consulting any state. The Decision has Path
	// sluice.PathOpen, Allowed true and zero Remaining, ResetAfter and RetryAfter (the
	// counts are unknown). The error is nil.
	FailOpen
	// FailClosed denies the request without consulting any state. The Decision has Path
	// sluice.PathClosed and Allowed false, and the error wraps sluice.ErrStoreUnavailable
	// and the store's error, so that front ends answer 503 rather than 429.
	FailClosed
	// FailLocal decides with an in-process limiter (package memory) under a share of the
	// limit (see Fallback.Share). The Decision has Path sluice.PathLocal and its Limit is
	// the share that was applied.
	FailLocal
)

var modeNames = [...]string{"unset", "open", "closed", "local"}

// String returns "open", "closed", "local" or "unset".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Path returns the sluice.Path of a decision made in mode m.
func (m Mode) Path() sluice.Path {
	switch m {
	case FailOpen:
		return sluice.PathOpen
	case FailClosed:
		return sluice.PathClosed
	case FailLocal:
		return sluice.PathLocal
	}
	return sluice.PathStore
}

// ParseMode parses "open", "closed" or "local" (case-insensitive; "fail_open",
// "fail-open" and the like are accepted too). The empty string is Unset.
func ParseMode(s string) (Mode, error) {
	norm := strings.ToLower(strings.TrimSpace(s))
	norm = strings.TrimPrefix(strings.TrimPrefix(norm, "fail_"), "fail-")
	switch norm {
	case "", "unset":
		return Unset, nil
	case "open":
		return FailOpen, nil
	case "closed", "close":
		return FailClosed, nil
	case "local":
		return FailLocal, nil
	}
	return Unset, fmt.Errorf("failover: unknown failure mode %q (want open, closed or local)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (m Mode) MarshalText() ([]byte, error) {
	if int(m) >= len(modeNames) {
		return nil, fmt.Errorf("failover: unknown failure mode %d", uint8(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *Mode) UnmarshalText(b []byte) error {
	v, err := ParseMode(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Fallback is how one decision is made when the store cannot make it. Its zero value
// chooses nothing; each field left zero is taken from the next rule.
//
// The rules, first non-zero field wins:
//
//  1. the Fallback carried by the context (WithFallback), set per call by a front end
//     that knows the request's policy;
//  2. the limiter's WithFallbackFunc, given the context, key and limit;
//  3. the limiter's defaults: WithDefaultMode (FailOpen unless set) and WithLocalShare
//     (1 unless set).
type Fallback struct {
	// Mode is the failure mode; Unset defers to the next rule.
	Mode Mode
	// Share is the share of the limit the in-process limiter gets in FailLocal mode, in
	// (0, 1]: typically 1/N for N nodes sharing the store, so that the fleet stays within
	// the limit while the store is away. 0 defers to the next rule; values outside (0, 1]
	// are treated as 0.
	Share float64
}

type fallbackKey struct{}

// WithFallback returns a context carrying f, which overrides the limiter's rules for
// decisions made with it (see Fallback).
func WithFallback(ctx context.Context, f Fallback) context.Context {
	return context.WithValue(ctx, fallbackKey{}, f)
}

// FallbackFrom returns the Fallback carried by ctx, if any.
func FallbackFrom(ctx context.Context) (Fallback, bool) {
	f, ok := ctx.Value(fallbackKey{}).(Fallback)
	return f, ok
}

// merge fills f's unset fields from g.
func (f Fallback) merge(g Fallback) Fallback {
	if f.Mode == Unset || f.Mode > FailLocal {
		f.Mode = g.Mode
	}
	if !(f.Share > 0 && f.Share <= 1) {
		f.Share = g.Share
	}
	return f
}

// ShareOf returns the limit the in-process limiter applies for limit under share: Rate
// and (when set) Burst multiplied by share and rounded down, but at least 1. Rounding
// down keeps N nodes, each with share 1/N, within the limit; the floor of 1 means a
// limit smaller than N can be exceeded, by at most N-Rate units per Period. A share
// outside (0, 1] returns limit unchanged.
func ShareOf(limit sluice.Limit, share float64) sluice.Limit {
	if !(share > 0 && share < 1) {
		return limit
	}
	scale := func(v int64) int64 {
		s := int64(float64(v) * share)
		if s < 1 {
			s = 1
		}
		if s > v {
			s = v
		}
		return s
	}
	limit.Rate = scale(limit.Rate)
	if limit.Burst > 0 {
		limit.Burst = scale(limit.Burst)
	}
	return limit
}
