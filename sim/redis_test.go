package sim

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRedisStoreDecidesAsMemory runs the patterns through a real redis-server with the
// simulation's clock and demands the same results, decision for decision, as the memory
// store: the Lua scripts and internal/algo agree under every kind of traffic, including
// the closed-loop retry-after clients.
func TestRedisStoreDecidesAsMemory(t *testing.T) {
	srv := redistest.Start(t)
	var patterns []Pattern
	for _, p := range Patterns(0.05) {
		if p.Name != "cloudflare" { // a network round trip per decision: keep the test short
			patterns = append(patterns, p)
		}
	}
	run := func(cfg Config) *Report {
		cfg.Patterns, cfg.Seed = patterns, 11
		r, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	mem := run(Config{})
	red := run(Config{Store: RedisStore(srv.URL()), StoreName: "redis"})
	for i := range mem.Results {
		m, r := mem.Results[i], red.Results[i]
		if m.digest != r.digest {
			t.Errorf("%s/%v: redis decided differently (admitted %d of %d, memory %d of %d)",
				m.Pattern, m.Algorithm, r.Admitted, r.Requests, m.Admitted, m.Requests)
		}
	}
	var a, b bytes.Buffer
	mem.WriteJSON(&a)
	red.WriteJSON(&b)
	if a.String() != b.String() {
		t.Error("JSON differs between the memory and the Redis store")
	}
	var h bytes.Buffer
	red.WriteHTML(&h)
	if !strings.Contains(h.String(), "store redis") {
		t.Error("the report does not name the Redis store")
	}
	// Each run deletes its keys when it ends.
	if n, err := srv.Do("DBSIZE"); err != nil || n != "0" {
		t.Errorf("DBSIZE after the runs = %q, %v; want 0", n, err)
	}
	// A second run on the same server starts afresh (its own key prefix).
	again := run(Config{Store: RedisStore(srv.URL()), StoreName: "redis"})
	var c bytes.Buffer
	again.WriteJSON(&c)
	if c.String() != b.String() {
		t.Error("a second run through the same Redis saw the first run's state")
	}
}
