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
)

func Example() {
	store := memory.New() // in production: a redisstore.Store
	defer store.Close()

	lim := failover.New(store,
		// The default is 5ms; this example allows more so that its output never depends
		// on how busy the machine is.
		failover.WithDeadline(time.Second),
		failover.WithDefaultMode(failover.FailLocal),
		failover.WithLocalShare(1.0/3), // three nodes share the store
	)
	defer lim.Close()

	d, err := lim.AllowN(context.Background(), "user:42", sluice.PerSecond(10), 1)
	fmt.Println(d.Allowed, d.Path, err, lim.State())
	// Output: true store <nil> closed
}

// downStore is a store whose server refuses connections.
type downStore struct{ sluice.Limiter }

func (downStore) AllowN(context.Context, string, sluice.Limit, int64) (sluice.Decision, error) {
	return sluice.Decision{}, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

// Each call chooses its failure mode through the context, as a front end does from the
// request's policy.
func Example_modes() {
	lim := failover.New(downStore{})
	defer lim.Close()

	limit := sluice.PerMinute(9)
	for _, m := range []failover.Mode{failover.FailOpen, failover.FailClosed, failover.FailLocal} {
		ctx := failover.WithFallback(context.Background(), failover.Fallback{Mode: m, Share: 1.0 / 3})
		var rep failover.Report
		d, err := lim.AllowN(failover.WithReport(ctx, &rep), "user:42", limit, 1)
		fmt.Printf("%-6v allowed=%v path=%v limit=%v kind=%v error=%v\n", m, d.Allowed, d.Path, d.Limit, rep.Kind, err)
	}
	// Output:
	// open   allowed=true path=open limit=9/1m0s gcra kind=refused error=<nil>
	// closed allowed=false path=closed limit=9/1m0s gcra kind=refused error=sluice: store unavailable: dial tcp: connect: connection refused
	// local  allowed=true path=local limit=3/1m0s gcra kind=refused error=<nil>
}

func ExampleShareOf() {
	fmt.Println(failover.ShareOf(sluice.PerSecond(100).WithBurst(20), 0.25))
	// Output: 25/1s gcra burst 5
}
