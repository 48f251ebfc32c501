package sim

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/redisstore"
)

// RedisStore returns a StoreFunc that runs each simulation through the Redis store at url
// (see redisstore.Open for the URL forms), deciding at the run's virtual time
// (redisstore.WithClock) instead of Redis's TIME. Each run gets keys under a prefix of its
// own ("sluice-sim:<random>:<n>:"), so runs never see each other's or an earlier
// invocation's state; the keys expire by their TTLs.
//
// A decision through Redis is a network round trip, so a full run takes minutes where the
// memory store takes seconds; scale the patterns down for a quick look.
func RedisStore(url string) StoreFunc {
	var nonce [6]byte
	rand.Read(nonce[:])
	prefix := "sluice-sim:" + hex.EncodeToString(nonce[:]) + ":"
	var n atomic.Int64
	return func(now func() time.Time) (sluice.Limiter, func() error, error) {
		s, err := redisstore.Open(url,
			redisstore.WithClock(now),
			redisstore.WithPrefix(fmt.Sprintf("%s%d:", prefix, n.Add(1))),
		)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	}
}
