// Command rediscost counts the instructions a redis-server executes per decision of
// sluice's Redis store, with callgrind: a figure that, unlike time, does not move with
// whatever else the machine is doing, so two versions of the decision script can be
// compared on a busy machine.
//
//	cd bench && go run ./cmd/rediscost                       # GCRA, 26 decisions per call
//	cd bench && go run ./cmd/rediscost -algorithm token_bucket -decisions 20000
//	cd bench && go run ./cmd/rediscost -batch 1 -decisions 8000   # lone decisions
//	cd bench && go run ./cmd/rediscost -lean -batch 16          # issue 3's yardstick
//	cd bench && go run ./cmd/rediscost -keep /tmp/cg.out && callgrind_annotate --inclusive=yes /tmp/cg.out
//
// It starts redis-server under `valgrind --tool=callgrind` on a free loopback port,
// decides once on each of -keys keys (the warm-up), has callgrind dump and reset its
// counters, then makes -decisions decisions from enough goroutines that every script
// call carries -batch of them, dumps again, and prints the instructions of the second
// dump divided by the decisions: everything Redis did meanwhile (reading, the script,
// expiring keys, replying), and the part inside EVALSHA. Under valgrind Redis runs about
// 50× slower; the defaults take about a minute. It needs valgrind (apt-get install
// valgrind) and redis-server on PATH.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/bench/internal/lean"
	"github.com/sluicehq/sluice/bench/internal/proc"
	"github.com/sluicehq/sluice/redisstore"
)

var (
	algorithm = flag.String("algorithm", "gcra", "the limit's algorithm")
	nkeys     = flag.Int("keys", 100_000, "distinct keys")
	decisions = flag.Int("decisions", 39_000, "decisions in the measured part")
	batch     = flag.Int("batch", 26, "decisions per script call (redisstore.WithBatchSize)")
	minTTL    = flag.Duration("min-ttl", 0, "redisstore.WithMinTTL")
	keep      = flag.String("keep", "", "copy the measured callgrind dump to this file (for callgrind_annotate)")
	leanFlag  = flag.Bool("lean", false, "decide with the issue's lean GCRA script (bench/internal/lean), -batch keys per call, instead of sluice's store")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "rediscost:", err)
		os.Exit(1)
	}
}

func run() error {
	var alg sluice.Algorithm
	if err := alg.UnmarshalText([]byte(*algorithm)); err != nil {
		return err
	}
	for _, bin := range []string{"valgrind", "callgrind_control", "callgrind_annotate", "redis-server"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found: apt-get install valgrind redis-server", bin)
		}
	}
	dir, err := os.MkdirTemp("", "rediscost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	port := proc.FreePort()
	out := filepath.Join(dir, "callgrind.out")
	srv := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+out,
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// Opening the store is also how rediscost waits for the slow redis-server to accept
	// connections; with -lean the store makes no decision (its scripts are loaded before
	// the counters are reset, so they cost the measurement nothing).
	s, err := waitOpen("redis://"+addr, *batch)
	if err != nil {
		return err
	}
	defer s.Close()
	limit := sluice.Limit{Algorithm: alg, Rate: 1000, Period: time.Second}
	if alg == sluice.SlidingLog {
		limit.Rate = 100
	}
	what := fmt.Sprintf("%v, %d decisions of %v", alg, *decisions, limit)
	one := func(ctx context.Context, key string) error {
		_, err := s.AllowN(ctx, key, limit, 1)
		return err
	}
	if *leanFlag {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			return err
		}
		defer c.Close()
		// Two calls in flight, 4·batch callers: every call carries batch keys.
		bt, err := lean.NewBatcher(context.Background(), c, *batch, 2)
		if err != nil {
			return err
		}
		defer bt.Close()
		one = bt.Decide
		what = fmt.Sprintf("lean GCRA script, %d decisions of 1000/s", *decisions)
	}

	// Warm-up: every key once, then reset the counters.
	if err := decide(one, *nkeys, 0); err != nil {
		return err
	}
	pid := strconv.Itoa(srv.Process.Pid)
	if err := exec.Command("callgrind_control", "-d", pid).Run(); err != nil {
		return fmt.Errorf("callgrind_control: %w", err)
	}
	if err := decide(one, *decisions, 7919); err != nil {
		return err
	}
	if err := exec.Command("callgrind_control", "-d", pid).Run(); err != nil {
		return fmt.Errorf("callgrind_control: %w", err)
	}
	dump := out + "." + pid + ".2"
	total, evalsha, err := instructions(dump)
	if err != nil {
		// callgrind names dumps <file>.<n> when the pid is already in the name.
		dump = out + ".2"
		if total, evalsha, err = instructions(dump); err != nil {
			return err
		}
	}
	if *keep != "" {
		b, err := os.ReadFile(dump)
		if err != nil {
			return err
		}
		if err := os.WriteFile(*keep, b, 0o644); err != nil {
			return err
		}
	}
	n := float64(*decisions)
	fmt.Printf("%s, %d per call: %.0f instructions per decision in redis-server, %.0f of them inside EVALSHA\n",
		what, *batch, float64(total)/n, float64(evalsha)/n)
	return nil
}

// waitOpen opens the store once redis-server, slow under valgrind, accepts connections.
func waitOpen(url string, batch int) (*redisstore.Store, error) {
	var err error
	for i := 0; i < 300; i++ {
		var s *redisstore.Store
		if s, err = redisstore.Open(url, redisstore.WithBatchSize(batch), redisstore.WithMinTTL(*minTTL)); err == nil {
			return s, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil, fmt.Errorf("redis-server under valgrind did not start: %w", err)
}

// decide makes n decisions on keys chosen with stride (0: key i), from enough goroutines
// that the store's batches fill up.
func decide(one func(context.Context, string) error, n, stride int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first atomic.Value
	for w := 0; w < 4**batch; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				k := i
				if stride > 0 {
					k = i * stride
				}
				if err := one(context.Background(), "user:"+strconv.Itoa(k%*nkeys)); err != nil {
					first.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}

// instructions reads a callgrind dump: the total, and the inclusive cost of
// evalShaCommand.
func instructions(file string) (total, evalsha int64, err error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "summary: "); ok {
			total, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	ann, err := exec.Command("callgrind_annotate", "--inclusive=yes", file).Output()
	if err != nil {
		return 0, 0, fmt.Errorf("callgrind_annotate: %w", err)
	}
	for _, line := range strings.Split(string(ann), "\n") {
		if strings.Contains(line, ":evalShaCommand ") {
			evalsha, _ = strconv.ParseInt(strings.ReplaceAll(strings.Fields(line)[0], ",", ""), 10, 64)
		}
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("%s: no instruction count", file)
	}
	return total, evalsha, nil
}
