package failover

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/store"
)

// TestRedisErrorKinds provokes real Redis failures and checks the Kind that the Report of
// a decision failed over carries: the Redis store classifies its own errors, and this
// holds its classification to what Redis really returns, as failover reads it.
func TestRedisErrorKinds(t *testing.T) {
	tests := []struct {
		name   string
		inject func(t *testing.T, srv *redistest.Server) (heal func())
		want   sluice.ErrorKind
	}{
		{
			name: "long script",
			inject: func(t *testing.T, srv *redistest.Server) func() {
				srv.MustDo("CONFIG", "SET", "busy-reply-threshold", "20")
				done := make(chan struct{})
				go func() {
					defer close(done)
					srv.Do("EVAL", "while true do end", "0") // ends with SCRIPT KILL
				}()
				time.Sleep(100 * time.Millisecond) // real fault: the script is running past busy-reply-threshold
				return func() {
					srv.MustDo("SCRIPT", "KILL")
					<-done
				}
			},
			want: store.KindBusy,
		},
		{
			name: "maxmemory",
			inject: func(t *testing.T, srv *redistest.Server) func() {
				srv.MustDo("CONFIG", "SET", "maxmemory-policy", "noeviction")
				srv.MustDo("CONFIG", "SET", "maxmemory", "1mb")
				srv.MustDo("DEBUG", "POPULATE", "30000", "filler", "16")
				return func() { srv.MustDo("CONFIG", "SET", "maxmemory", "0") }
			},
			want: store.KindOOM,
		},
		{
			name: "replica",
			inject: func(t *testing.T, srv *redistest.Server) func() {
				srv.MustDo("CONFIG", "SET", "replica-serve-stale-data", "yes")
				srv.MustDo("REPLICAOF", "127.0.0.1", "1") // a primary that never answers
				return func() { srv.MustDo("REPLICAOF", "NO", "ONE") }
			},
			want: store.KindReadOnly,
		},
		{
			name: "killed",
			inject: func(t *testing.T, srv *redistest.Server) func() {
				srv.Kill()
				return srv.Restart
			},
			want: store.KindRefused,
		},
		{
			name: "frozen",
			inject: func(t *testing.T, srv *redistest.Server) func() {
				srv.Pause()
				return srv.Resume
			},
			want: store.KindTimeout,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := redistest.Start(t)
			store, err := redisstore.Open(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			lim := New(store, WithDeadline(300*time.Millisecond), WithDefault(sluice.Failure{Mode: sluice.FailClosed}),
				WithBreaker(Breaker{ConsecutiveFailures: 1 << 30, MinCalls: 1 << 30}))
			defer lim.Close()
			limit := sluice.PerMinute(1000)
			poll.Until(t, 5*time.Second, "a store decision", func() bool {
				d, err := lim.AllowN(context.Background(), "warm", limit, 1)
				return err == nil && d.Path == sluice.PathStore
			})

			heal := tt.inject(t, srv)
			var rep sluice.Report
			i := 0 // the first calls may still ride an old connection
			poll.UntilDescribed(t, 10*time.Second, "a decision failing with kind "+string(tt.want), func() bool {
				var d sluice.Decision
				var err error
				d, rep, err = decideOne(context.Background(), lim, sluice.Request{Key: fmt.Sprintf("k%d", i), Limit: limit, N: 1})
				i++
				if d.Path == sluice.PathStore {
					return false
				}
				if d.Path != sluice.PathClosed || err == nil {
					t.Fatalf("%+v, %v", d, err)
				}
				if !errors.Is(err, sluice.ErrStoreUnavailable) || rep.Failure == nil || !errors.Is(err, rep.Failure) {
					t.Fatalf("closed: %v, report %+v; want ErrStoreUnavailable and the report's cause", err, rep)
				}
				return rep.Kind == tt.want
			}, func() string { return fmt.Sprintf("kind %q, cause %v", rep.Kind, rep.Failure) })
			t.Logf("cause: %v", rep.Failure)
			if rep.Kind != tt.want {
				t.Errorf("kind %q (cause %v), want %q", rep.Kind, rep.Failure, tt.want)
			}
			heal()
			poll.Until(t, 10*time.Second, "the store to decide again", func() bool {
				d, err := lim.AllowN(context.Background(), "after", limit, 1)
				return err == nil && d.Path == sluice.PathStore
			})
		})
	}
}
