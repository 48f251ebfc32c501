package httplimit

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/stack"
)

// backend is a real store under the production stack (stack.Open: observe, failover on
// Redis, deny cache), which the end-to-end tests of the middleware run against, so that
// the tested system is the shipped one.
type backend struct {
	name string
	// open builds the stack on this store with o (o.Clock is the caller's).
	open func(t *testing.T, o stack.Options) *stack.Stack
}

// new returns the stack's top Limiter deciding at a fake clock's time, and the clock.
func (b backend) new(t *testing.T) (sluice.Limiter, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(start)
	return b.open(t, stack.Options{Clock: clk.Now}).Limiter(), clk
}

var redisPrefixes atomic.Int64

// openStack builds the production stack with o, on Redis at redisURL ("" for memory), and
// closes it when the test ends. On Redis every stack has its own key prefix, so that
// subtests sharing a server never share state, and a generous deadline: tests share two
// cores, and a slow answer must not turn into the failure mode's decision.
func openStack(t testing.TB, redisURL string, o stack.Options) *stack.Stack {
	t.Helper()
	if redisURL != "" {
		o.RedisURL = redisURL
		if o.Deadline == 0 {
			o.Deadline = 2 * time.Second
		}
		o.RedisOptions = append(o.RedisOptions,
			// A fake clock runs slower than Redis's: keep state for the test's life.
			redisstore.WithMinTTL(time.Hour),
			redisstore.WithPrefix(fmt.Sprintf("t%d:", redisPrefixes.Add(1))))
	}
	st, err := stack.Open(nil, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// backends starts one redis-server for the calling test and returns the memory and
// Redis backends.
func backends(t *testing.T) []backend {
	t.Helper()
	srv := redistest.Start(t)
	return []backend{
		{"memory", func(t *testing.T, o stack.Options) *stack.Stack { return openStack(t, "", o) }},
		{"redis", func(t *testing.T, o stack.Options) *stack.Stack { return openStack(t, srv.URL(), o) }},
	}
}

// TestRawAPIKeyNeverLeaksRedis scans every key in Redis (KEYS and SCAN), every log line
// (the middleware's and the production stack's decision log) and every response header
// and body for the raw API key.
func TestRawAPIKeyNeverLeaksRedis(t *testing.T) {
	srv := redistest.Start(t)
	var stackLogs bytes.Buffer
	clk := clocktest.New(start)
	st := openStack(t, srv.URL(), stack.Options{Clock: clk.Now, Sampling: 1,
		Logger: slog.New(slog.NewJSONHandler(&stackLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	responses, logs, mac := leakSurface(t, st.Limiter())
	logs += stackLogs.String()
	if !strings.Contains(stackLogs.String(), "rate limit decision") {
		t.Errorf("the stack logged no decision; the scan of its log proved nothing:\n%s", stackLogs.String())
	}

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

// TestPolicyFailureWhenRedisIsDown: each policy's Failure travels with its limit to the
// stack's failover layer, which decides by it when Redis is down: open (allowed, named in
// RateLimit-Policy but not counted in RateLimit), closed (503), local (a share of the
// limit, in-process); a request of several policies fails as its strictest enforced one
// says, and a shadow policy's mode never denies.
func TestPolicyFailureWhenRedisIsDown(t *testing.T) {
	srv := redistest.Start(t)
	clk := clocktest.New(start)
	st := openStack(t, srv.URL(), stack.Options{Clock: clk.Now})
	limit := sluice.PerHour(4)
	open := Policy{Name: "open", Limit: limit, Failure: sluice.Failure{Mode: sluice.FailOpen}}
	closed := Policy{Name: "closed", Limit: limit, Failure: sluice.Failure{Mode: sluice.FailClosed}}
	local := Policy{Name: "local", Limit: limit, Failure: sluice.Failure{Mode: sluice.FailLocal, Share: 0.5}}
	shadowClosed := closed
	shadowClosed.Name, shadowClosed.Shadow = "shadow-closed", true
	handler := func(ps ...Policy) http.Handler {
		// ShadowHeaders: the shadow policy's header item shows it was decided.
		return mustNew(t, Config{Limiter: st.Limiter(), Policies: ps, ShadowHeaders: true}).Handler(okHandler)
	}
	hOpen, hClosed, hLocal := handler(open), handler(closed), handler(local)
	hBoth, hShadow := handler(open, closed), handler(open, shadowClosed)
	// Up: the store decides.
	if w := do(hClosed, "GET", "/", ""); w.Code != 200 || w.Header().Get("RateLimit") != `"closed";r=3;t=900` {
		t.Fatalf("Redis up: %d %q", w.Code, w.Header().Get("RateLimit"))
	}
	srv.Kill()
	tests := []struct {
		name     string
		h        http.Handler
		status   int
		policy   string // RateLimit-Policy
		rateLim  string // RateLimit
		retryAft string
	}{
		{"open", hOpen, 200, `"open";q=4;w=3600`, "", ""},
		{"closed", hClosed, 503, "", "", "1"},
		// The local share of 4/h is 2/h, in-process and on the real clock.
		{"local 1", hLocal, 200, `"local";q=2;w=3600`, `"local";r=1;t=1800`, ""},
		{"local 2", hLocal, 200, `"local";q=2;w=3600`, `"local";r=0;t=3600`, ""},
		{"local 3", hLocal, 429, `"local";q=2;w=3600`, `"local";r=0;t=1800`, "1800"},
		{"open and closed: the strictest", hBoth, 503, "", "", "1"},
		{"open and shadow closed: the enforced one", hShadow, 200, `"open";q=4;w=3600, "shadow-closed";q=4;w=3600`, "", ""},
	}
	for _, tt := range tests {
		w := do(tt.h, "GET", "/", "")
		h := w.Header()
		if w.Code != tt.status || h.Get("RateLimit-Policy") != tt.policy || h.Get("RateLimit") != tt.rateLim || h.Get("Retry-After") != tt.retryAft {
			t.Errorf("%s: %d RateLimit-Policy %q RateLimit %q Retry-After %q, want %d %q %q %q", tt.name,
				w.Code, h.Get("RateLimit-Policy"), h.Get("RateLimit"), h.Get("Retry-After"),
				tt.status, tt.policy, tt.rateLim, tt.retryAft)
		}
	}
}
