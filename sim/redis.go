package sim

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// RedisStore returns a StoreFunc that runs each simulation through the Redis store at url
// (see redisstore.Open), deciding at the run's virtual time (redisstore.WithClock). Each
// run has a key prefix of its own ("sluice-sim:<random>:<n>:"), so no run sees another's
// state. Every TTL is at least redisMinTTL, since a run can be slower than its virtual
// time; when the run ends its keys are deleted.
func RedisStore(url string) StoreFunc {
	var nonce [6]byte
	rand.Read(nonce[:])
	base := "sluice-sim:" + hex.EncodeToString(nonce[:]) + ":"
	var n atomic.Int64
	return func(now func() time.Time) (sluice.Limiter, func() error, error) {
		prefix := fmt.Sprintf("%s%d:", base, n.Add(1))
		s, err := redisstore.Open(url,
			redisstore.WithClock(now),
			redisstore.WithPrefix(prefix),
			redisstore.WithMinTTL(redisMinTTL),
		)
		if err != nil {
			return nil, nil, err
		}
		return s, func() error {
			err := deletePrefix(s.Client(), prefix)
			return errors.Join(err, s.Close())
		}, nil
	}
}

// redisMinTTL bounds how long a simulated key may go untouched in real time.
const redisMinTTL = 15 * time.Minute

// deletePrefix deletes every key under prefix on every primary.
func deletePrefix(c rueidis.Client, prefix string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for addr, node := range c.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				if isReplicaOnly(err) {
					break
				}
				return fmt.Errorf("sim: cleaning up %s on %s: %w", prefix, addr, err)
			}
			for _, k := range e.Elements {
				// One key per DEL: on a cluster the keys of one scan span slots.
				if err := node.Do(ctx, node.B().Del().Key(k).Build()).Error(); err != nil && !isReplicaOnly(err) {
					return fmt.Errorf("sim: cleaning up %s on %s: %w", k, addr, err)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// isReplicaOnly reports a write refused by a replica (MOVED/READONLY): its primary, also
// among the nodes, holds the keys.
func isReplicaOnly(err error) bool {
	if re, ok := errors.AsType[*rueidis.RedisError](err); ok {
		_, moved := re.IsMoved()
		return moved || strings.HasPrefix(re.Error(), "READONLY")
	}
	return false
}
