// Package lean is the yardstick of issue 3's Redis-time target: the "lean integer GCRA
// script deciding 16 keys per call" that the issue measured at 2.95 µs of Redis time per
// decision. It is the least a GCRA decision on Redis can do: TIME once per call, then per
// key a GET of the TAT as decimal text and a SET with a PX expiry; no state checks, no
// Remaining or ResetAfter, no burst other than the limit's. sluice's script is measured
// against it in the same run (the bench Redis rows "lean-gcra-x16", and bench/cmd/rediscost
// -lean), so that a figure in µs, which moves with the machine, becomes a ratio.
package lean

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
)

// Script decides every key of KEYS at once (lean.lua). ARGV: emission interval T (µs),
// tolerance (burst-1)·T, cost. It returns, per key, 0 when allowed and the µs to wait
// when denied.
//
//go:embed lean.lua
var Script string

// Args is 1000 per second with a burst of 1000, cost 1: the limit of the Redis benchmarks.
var Args = []string{"1000", "999000", "1"}

// Batcher sends concurrent decisions to Script in calls of up to Size keys: a caller's
// decision joins whatever others are waiting, and Workers calls are in flight at most.
// It waits for nothing: a call leaves as soon as a worker is free, with what has queued
// meanwhile, which is how sluice's store coalesces too.
type Batcher struct {
	client rueidis.Client
	sha    string
	size   int
	reqs   chan request
	done   chan struct{}
}

type request struct {
	key   string
	reply chan error
}

// NewBatcher loads Script and starts workers goroutines, each sending calls of up to size
// keys.
func NewBatcher(ctx context.Context, c rueidis.Client, size, workers int) (*Batcher, error) {
	sha, err := c.Do(ctx, c.B().ScriptLoad().Script(Script).Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("lean: SCRIPT LOAD: %w", err)
	}
	b := &Batcher{client: c, sha: sha, size: size, reqs: make(chan request, 4096), done: make(chan struct{})}
	for w := 0; w < workers; w++ {
		go b.work()
	}
	return b, nil
}

// Decide decides one unit on key.
func (b *Batcher) Decide(ctx context.Context, key string) error {
	r := request{key: key, reply: make(chan error, 1)}
	select {
	case b.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-r.reply
}

// Close stops the workers.
func (b *Batcher) Close() { close(b.done) }

func (b *Batcher) work() {
	batch := make([]request, 0, b.size)
	keys := make([]string, 0, b.size)
	for {
		batch, keys = batch[:0], keys[:0]
		select {
		case r := <-b.reqs:
			batch = append(batch, r)
		case <-b.done:
			return
		}
	fill:
		for len(batch) < b.size {
			select {
			case r := <-b.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		for _, r := range batch {
			keys = append(keys, r.key)
		}
		err := Call(context.Background(), b.client, b.sha, keys)
		for _, r := range batch {
			r.reply <- err
		}
	}
}

// Call decides keys in one EVALSHA of the script loaded as sha.
func Call(ctx context.Context, c rueidis.Client, sha string, keys []string) error {
	cmd := c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(Args...).Build()
	vals, err := c.Do(ctx, cmd).ToArray()
	if err != nil {
		return fmt.Errorf("lean: EVALSHA: %w", err)
	}
	if len(vals) != len(keys) {
		return fmt.Errorf("lean: %d answers for %d keys", len(vals), len(keys))
	}
	return nil
}

// Size is the batch: 16 keys per call.
const Size = 16

// Name is the benchmark rows' name for the batcher at Size.
var Name = "lean-gcra-x" + strconv.Itoa(Size)
