package httplimit

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
)

// backend is a real store the middleware tests run against, on a settable clock.
type backend struct {
	name string
	new  func(t *testing.T) (sluice.Limiter, *clocktest.Clock)
}

var redisPrefixes atomic.Int64

// newRedisStore returns a Redis store on srv deciding at a fake clock's time, with its own
// key prefix so that subtests sharing srv never share state.
func newRedisStore(t *testing.T, srv *redistest.Server) (*redisstore.Store, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(start)
	s, err := redisstore.Open(srv.URL(),
		redisstore.WithClock(clk.Now),
		// The fake clock runs slower than Redis's: keep state for the test's life.
		redisstore.WithMinTTL(time.Hour),
		redisstore.WithPrefix(fmt.Sprintf("t%d:", redisPrefixes.Add(1))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, clk
}

// backends starts one redis-server for the calling test and returns the memory and
// Redis backends.
func backends(t *testing.T) []backend {
	t.Helper()
	srv := redistest.Start(t)
	return []backend{
		{"memory", func(t *testing.T) (sluice.Limiter, *clocktest.Clock) { return newStore(t) }},
		{"redis", func(t *testing.T) (sluice.Limiter, *clocktest.Clock) { return newRedisStore(t, srv) }},
	}
}

// TestRawAPIKeyNeverLeaksRedis scans every key in Redis (KEYS and SCAN), every log line and
// every response header and body for the raw API key.
func TestRawAPIKeyNeverLeaksRedis(t *testing.T) {
	srv := redistest.Start(t)
	store, _ := newRedisStore(t, srv)
	responses, logs, mac := leakSurface(t, store)

	keysReply := srv.MustDo("KEYS", "*")
	var scanned []string
	for cursor := "0"; ; {
		reply := strings.Split(srv.MustDo("SCAN", cursor, "COUNT", "1000"), "\n")
		cursor, scanned = reply[0], append(scanned, reply[1:]...)
		if cursor == "0" {
			break
		}
	}
	redisKeys := keysReply + "\n" + strings.Join(scanned, "\n")
	for what, text := range map[string]string{"Redis keys": redisKeys, "logs": logs, "responses": responses} {
		if strings.Contains(text, rawAPIKey) {
			t.Errorf("the raw API key appears in the %s:\n%s", what, text)
		}
	}
	if !strings.Contains(keysReply, mac) || !strings.Contains(strings.Join(scanned, "\n"), mac) || !strings.Contains(logs, mac) {
		t.Errorf("the MAC %s is missing from Redis or the logs; the scan proved nothing\nkeys:\n%s", mac, redisKeys)
	}
	// Values too: a key's state must hold numbers only, never the identity.
	for _, k := range strings.Split(keysReply, "\n") {
		if k == "" {
			continue
		}
		typ := srv.MustDo("TYPE", k)
		var v string
		switch typ {
		case "string":
			v = srv.MustDo("GET", k)
		case "zset":
			v = srv.MustDo("ZRANGE", k, "0", "-1", "WITHSCORES")
		case "hash":
			v = srv.MustDo("HGETALL", k)
		}
		if strings.Contains(v, rawAPIKey) {
			t.Errorf("Redis key %s holds the raw API key: %q", k, v)
		}
	}
}
