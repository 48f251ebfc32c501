package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store"
)

// replyErr is an error shaped like a Redis client's error reply (its message is the
// reply, code first).
type replyErr string

func (e replyErr) Error() string { return string(e) }

// decideErr is a Redis error reply wrapped the way the store wraps it.
func decideErr(reply string) error { return fmt.Errorf("redisstore: decide: %w", replyErr(reply)) }

func TestClassify(t *testing.T) {
	refused := func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			t.Fatal("dial to a closed port succeeded")
		}
		return fmt.Errorf("redisstore: decide: %w", err)
	}()
	tests := []struct {
		err  error
		want sluice.ErrorKind
	}{
		{nil, ""},
		{fmt.Errorf("x: %w", sluice.ErrInvalidLimit), store.KindBadInput},
		{fmt.Errorf("x: %w", os.ErrDeadlineExceeded), store.KindTimeout},
		{refused, store.KindRefused},
		{fmt.Errorf("x: %w", &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), store.KindReset},
		{fmt.Errorf("x: %w", syscall.EPIPE), store.KindReset},
		{fmt.Errorf("x: %w", io.EOF), store.KindReset},
		{fmt.Errorf("x: %w", io.ErrUnexpectedEOF), store.KindReset},
		{errors.New("rueidis client is closing or unable to connect redis"), store.KindRefused},
		{decideErr("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), store.KindBusy},
		{decideErr("OOM command not allowed when used memory > 'maxmemory'."), store.KindOOM},
		{decideErr("LOADING Redis is loading the dataset in memory"), store.KindLoading},
		{decideErr("READONLY You can't write against a read only replica."), store.KindReadOnly},
		{decideErr("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), store.KindReadOnly},
		{decideErr("CLUSTERDOWN The cluster is down"), store.KindClusterDown},
		{decideErr("MOVED 3999 127.0.0.1:6381"), store.KindRedirect},
		{decideErr("ASK 3999 127.0.0.1:6381"), store.KindRedirect},
		{decideErr("TRYAGAIN Multiple keys request during rehashing of slot"), store.KindRedirect},
		{decideErr("NOSCRIPT No matching script. Please use EVAL."), store.KindNoScript},
		// The reply formatted into a message rather than wrapped.
		{fmt.Errorf("redisstore: decide: %v", "OOM command not allowed"), store.KindOOM},
		// A reply that wraps a timeout is still the reply.
		{errors.Join(replyErr("LOADING loading"), context.DeadlineExceeded), store.KindLoading},
		{decideErr("ERR Error running script (call to f_x): @user_script:1: bad argument"), store.KindOther},
		// A word that merely starts like a code is not one.
		{decideErr("BUSYGROUP Consumer Group name already exists"), store.KindOther},
		// Errors retrying cannot fix (issue 39, item 7).
		{decideErr("WRONGPASS invalid username-password pair or user is disabled."), store.KindMisconfigured},
		{decideErr("NOAUTH HELLO must be called with the client already authenticated"), store.KindMisconfigured},
		{decideErr("NOPERM User limiter has no permissions to run the 'evalsha' command"), store.KindMisconfigured},
		{fmt.Errorf("redisstore: connect: %w", replyErr("DB index is out of range")), store.KindMisconfigured},
		{fmt.Errorf("redisstore: connect: %w", replyErr("This instance has cluster support disabled")), store.KindMisconfigured},
		{fmt.Errorf("redisstore: connect: %w", replyErr("No such master with that name")), store.KindMisconfigured},
		{fmt.Errorf("redisstore: connect: %w", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}), store.KindMisconfigured},
		{fmt.Errorf("redisstore: connect: %w", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "redis"}), store.KindMisconfigured},
	}
	for _, tt := range tests {
		name := "nil"
		if tt.err != nil {
			name = tt.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			if got := classify(tt.err); got != tt.want {
				t.Errorf("classify(%v) = %q, want %q", tt.err, got, tt.want)
			}
			// What the store returns (failed) carries the class for the layers above.
			if got := sluice.KindOf(failed(context.Background(), tt.err)); tt.err != nil && got != tt.want {
				t.Errorf("KindOf(failed(%v)) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

// TestFailedKeepsStoreError: an error that already carries a class keeps it.
func TestFailedKeepsStoreError(t *testing.T) {
	se := &sluice.StoreError{Kind: store.KindTimeout, Err: decideErr("LOADING Redis is loading the dataset in memory")}
	if got := failed(context.Background(), fmt.Errorf("x: %w", se)); sluice.KindOf(got) != store.KindTimeout || !errors.Is(got, se) {
		t.Errorf("failed(%v) = %v of kind %q, want it kept", se, got, sluice.KindOf(got))
	}
	if failed(context.Background(), nil) != nil {
		t.Error("failed(nil) is not nil")
	}
}

// TestFailedForeignCancel: a cancellation is the caller's when the call's context has
// ended; while it is live, the cancellation came from another call (one whose dial this
// call waited on) and is a store failure that no longer reads as context.Canceled.
func TestFailedForeignCancel(t *testing.T) {
	err := fmt.Errorf("redisstore: decide: dial tcp 127.0.0.1:1: %w", context.Canceled)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if got := failed(gone, err); sluice.KindOf(got) != store.KindCanceled || !errors.Is(got, context.Canceled) {
		t.Errorf("the caller's own cancellation: %v of kind %q, want %q", got, sluice.KindOf(got), store.KindCanceled)
	}
	if got := failed(context.Background(), err); sluice.KindOf(got) != store.KindRefused || errors.Is(got, context.Canceled) {
		t.Errorf("another call's cancellation: %v of kind %q, want %q and no context.Canceled", got, sluice.KindOf(got), store.KindRefused)
	}
}

// TestMisconfigurationCause: a misconfiguration's error names its cause and says that
// retrying cannot fix it.
func TestMisconfigurationCause(t *testing.T) {
	for reply, cause := range map[string]string{
		"WRONGPASS invalid username-password pair":                          CauseAuth,
		"DB index is out of range":                                          CauseDatabase,
		"This instance has cluster support disabled":                        CauseCluster,
		"unknown command 'SENTINEL', with args beginning with: 'SENTINELS'": CauseSentinel,
		"unknown command 'EVALSHA'":                                         CauseCommand,
	} {
		err := failed(context.Background(), fmt.Errorf("redisstore: connect: %w", replyErr(reply)))
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Cause != cause {
			t.Errorf("%q: %v, want a ConfigError of cause %q", reply, err, cause)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "retrying cannot fix it") || !strings.Contains(msg, reply) {
			t.Errorf("%q: message %q", reply, msg)
		}
	}
}
