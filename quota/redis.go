package quota

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// ErrNotConnected is Rebalance's error while the Redis client is not connected yet.
var ErrNotConnected = errors.New("quota: Redis not connected")

//go:embed rebalance.lua
var rebalanceLua string

var rebalanceSHA = func() string { h := sha1.Sum([]byte(rebalanceLua)); return hex.EncodeToString(h[:]) }()

// Redis is a Store in Redis: a bucket is a hash of its clients (prefix{Report.Key}:c) and
// a sorted set of their expiries (:e), in one hash slot, rebalanced by one script call
// per report (rebalance.lua); instances on one Redis share the clients and the bound.
// Both keys expire one TTL after the last report.
type Redis struct {
	client func() rueidis.Client
	prefix string
	now    func() time.Time
}

// NewRedis returns a Redis store on the client that client returns (nil while not
// connected: Rebalance then fails with ErrNotConnected). now is the clock; nil uses
// Redis's TIME.
func NewRedis(client func() rueidis.Client, prefix string, now func() time.Time) *Redis {
	return &Redis{client: client, prefix: prefix, now: now}
}

// Rebalance implements Store: every report of one call in one pipeline.
func (r *Redis) Rebalance(ctx context.Context, reps []Report, out []Assignment) error {
	if len(reps) == 0 {
		return nil
	}
	c := r.client()
	if c == nil {
		return ErrNotConnected
	}
	now := "-"
	if r.now != nil {
		now = strconv.FormatInt(r.now().UnixMicro(), 10)
	}
	maxc := strconv.Itoa(MaxClients)
	// call is reps[i]'s script call: EVALSHA, or EVAL (which loads the script) when eval.
	call := func(i int, eval bool) rueidis.Completed {
		rep := &reps[i]
		base := r.prefix + "{" + rep.Key + "}"
		keys, args := []string{base + ":c", base + ":e"}, []string{now, rep.Client, strconv.FormatInt(rep.Rate, 10),
			strconv.FormatInt(rep.Weight, 10), strconv.FormatInt(rep.TTL.Microseconds(), 10), maxc}
		if eval {
			return c.B().Eval().Script(rebalanceLua).Numkeys(2).Key(keys...).Arg(args...).Build()
		}
		return c.B().Evalsha().Sha1(rebalanceSHA).Numkeys(2).Key(keys...).Arg(args...).Build()
	}
	cmds := make(rueidis.Commands, len(reps))
	for i := range reps {
		cmds[i] = call(i, false)
	}
	for i, rr := range c.DoMulti(ctx, cmds...) {
		if err, ok := rueidis.IsRedisErr(rr.Error()); ok && err.IsNoScript() {
			rr = c.Do(ctx, call(i, true))
		}
		vs, err := rr.AsIntSlice()
		if err != nil {
			return fmt.Errorf("quota: rebalance: %w", err)
		}
		if len(vs) != 3 {
			return fmt.Errorf("quota: rebalance: script returned %d values, want 3", len(vs))
		}
		out[i] = Assignment{Rate: vs[0], Clients: vs[1], Assigned: vs[2]}
	}
	return nil
}
