package failover_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/store"
)

func Example() {
	store := memory.New() // in production: a redisstore.Store
	defer store.Close()

	local := memory.New() // decides in FailLocal mode while the store is away
	defer local.Close()

	lim := failover.New(store,
		// The default is 5ms; this example allows more so that its output never depends
		// on how busy the machine is.
		failover.WithDeadline(time.Second),
		failover.WithDefault(sluice.Failure{Mode: sluice.FailLocal, Share: 1.0 / 3}), // three nodes share the store
		failover.WithLocalLimiter(local),
	)
	defer lim.Close()

	d, err := lim.AllowN(context.Background(), "user:42", sluice.PerSecond(10), 1)
	fmt.Println(d.Allowed, d.Path, err, lim.State())
	// Output: true store <nil> closed
}

// downStore is a store whose server refuses connections. Like the Redis store, it
// classifies its failures itself (sluice.StoreError).
type downStore struct{ sluice.Limiter }

func (downStore) Decide(context.Context, []sluice.Request, []sluice.Decision) (sluice.Report, error) {
	err := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	return sluice.Report{StoreCalled: true, Kind: store.KindRefused}, &sluice.StoreError{Kind: store.KindRefused, Err: err}
}

// Each request chooses its failure mode in its Failure, as a front end does from the
// request's policy.
func Example_modes() {
	local := memory.New()
	defer local.Close()
	lim := failover.New(downStore{}, failover.WithLocalLimiter(local))
	defer lim.Close()

	limit := sluice.PerMinute(9)
	for _, m := range []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		reqs := []sluice.Request{{Key: "user:42", Limit: limit, N: 1, Failure: sluice.Failure{Mode: m, Share: 1.0 / 3}}}
		ds := make([]sluice.Decision, 1)
		rep, err := lim.Decide(context.Background(), reqs, ds)
		d := ds[0]
		fmt.Printf("%-6v allowed=%v path=%v limit=%v kind=%v error=%v\n", m, d.Allowed, d.Path, d.Limit, rep.Kind, err)
	}
	// Output:
	// open   allowed=true path=open limit=9/1m0s gcra kind=refused error=<nil>
	// closed allowed=false path=closed limit=9/1m0s gcra kind=refused error=sluice: store unavailable: dial tcp: connect: connection refused
	// local  allowed=true path=local limit=3/1m0s gcra kind=refused error=<nil>
}
