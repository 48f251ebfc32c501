package store

import (
	"context"

	"github.com/sluicehq/sluice"
)

// Kinds of store failures: the store could not decide, and the failure mode applies. A
// store returns its failures as a [sluice.StoreError] of one of these kinds.
const (
	// KindTimeout: the decision's deadline passed (the store or the network is slow, or
	// the server is frozen), or a network timeout.
	KindTimeout sluice.ErrorKind = "timeout"
	// KindRefused: the connection was refused or could not be made (the server is down,
	// or a connection attempt shared with another call ended with that call: see
	// [ForeignCancel]).
	KindRefused sluice.ErrorKind = "refused"
	// KindReset: the connection was reset or closed under the request.
	KindReset sluice.ErrorKind = "reset"
	// KindBusy: the server is busy (a Redis running a long script).
	KindBusy sluice.ErrorKind = "busy"
	// KindOOM: the server is out of memory and refuses writes.
	KindOOM sluice.ErrorKind = "oom"
	// KindLoading: the server is loading its dataset.
	KindLoading sluice.ErrorKind = "loading"
	// KindReadOnly: the node is (or follows) a replica that cannot take writes,
	// typically during a failover.
	KindReadOnly sluice.ErrorKind = "readonly"
	// KindClusterDown: the cluster cannot serve the slot.
	KindClusterDown sluice.ErrorKind = "clusterdown"
	// KindRedirect: a cluster redirection did not settle (a resharding storm or a stale
	// topology).
	KindRedirect sluice.ErrorKind = "redirect"
	// KindNoScript: the store's script was missing and could not be loaded again.
	KindNoScript sluice.ErrorKind = "noscript"
	// KindBreakerOpen: the store was not called because the circuit breaker is open.
	KindBreakerOpen sluice.ErrorKind = "breaker_open"
	// KindOverload: the store was not called because too many earlier calls are still
	// running past their deadline.
	KindOverload sluice.ErrorKind = "overload"
	// KindMisconfigured: the store refuses the connection's settings (credentials or
	// permissions, a database it does not have, a certificate that does not verify, a
	// cluster or Sentinel address of a server that is not one). Retrying cannot fix it:
	// the operator must. The failure mode applies meanwhile.
	KindMisconfigured sluice.ErrorKind = "misconfigured"
	// KindOther: any other failure of the store (a script error, an unexpected reply).
	KindOther sluice.ErrorKind = "other"
)

// Kinds of errors that are not store failures: they are returned as they are, never
// decided by a failure mode and never counted by a circuit breaker. [sluice.KindOf] gives
// them to the sentinel errors and to context errors.
const (
	// KindBadInput: the caller's input is invalid ([IsBadInput]).
	KindBadInput sluice.ErrorKind = "bad_input"
	// KindCanceled: the caller's context ended before the store answered.
	KindCanceled sluice.ErrorKind = "canceled"
	// KindClosed: the limiter or the store has been closed ([sluice.ErrClosed]).
	KindClosed sluice.ErrorKind = "closed"
)

// IsFailure reports whether k is a store failure, to which the failure mode applies.
func IsFailure(k sluice.ErrorKind) bool {
	switch k {
	case "", KindBadInput, KindCanceled, KindClosed:
		return false
	}
	return true
}

// IsBadInput reports whether err is about the caller's input (limit, cost, key, lease or
// reservation) rather than a failure of the store: [sluice.KindOf] is [KindBadInput]. Bad
// input is never failed open.
func IsBadInput(err error) bool { return sluice.KindOf(err) == KindBadInput }

// ForeignCancel returns err, the error of a store call made under ctx, as a store failure
// when it reads as a cancellation ([KindCanceled]) while ctx is live: another call that
// shared work with this one (a dial, a batch) ended and took it down. The result is a
// [sluice.StoreError] of [KindRefused] that no longer matches context.Canceled. Any other
// err, nil included, is returned as it is.
func ForeignCancel(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || sluice.KindOf(err) != KindCanceled {
		return err
	}
	return &sluice.StoreError{Kind: KindRefused, Err: foreignCancel{err}}
}

// foreignCancel keeps a foreign cancellation's message but not its chain.
type foreignCancel struct{ err error }

func (e foreignCancel) Error() string {
	return e.err.Error() + " (another call's cancellation; this call's context is live)"
}
