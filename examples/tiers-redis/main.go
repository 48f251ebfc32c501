// Command tiers-redis runs the tiers API with its limits in Redis, so every instance
// behind a load balancer shares them.
//
//	export SLUICE_API_KEY_SECRET=$(head -c 32 /dev/urandom | base64)   # the same on every instance
//	go run ./examples/tiers-redis -redis redis://localhost:6379 -addr localhost:8080
//	go run ./examples/tiers-redis -redis redis://localhost:6379 -addr localhost:8081
//	curl -i -H 'X-API-Key: demo-free-key' -X POST localhost:8080/v1/orders   # 201
//	curl -i -H 'X-API-Key: demo-free-key' -X POST localhost:8081/v1/orders   # 201
//	curl -i -H 'X-API-Key: demo-free-key' -X POST localhost:8080/v1/orders   # 429
//
// The limiter is the stack `sluice serve` runs (package stack): Redis, a deny cache that
// answers a client over its limit without a Redis call until the denial could change,
// failover with its default deadline, and decision logs. Redis keys hold the API keys' HMAC,
// never the keys. When Redis is unreachable the API fails open (the default; -failure-mode
// closed answers 503 with Retry-After, local decides in-process with a share of each
// limit).
package main

import (
	"flag"
	"log"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/examples/internal/tierapi"
	"github.com/sluicehq/sluice/stack"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "listen address")
	redisURL := flag.String("redis", "redis://localhost:6379", "Redis URL (standalone, Sentinel or Cluster; see package redisstore)")
	trusted := flag.String("trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed")
	mode := flag.String("failure-mode", "open", "when Redis cannot decide: open, closed or local")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	secret := os.Getenv("SLUICE_API_KEY_SECRET")
	if secret == "" {
		// Instances sharing Redis must hash API keys with one secret, or each would
		// count the same key under a different Redis key.
		log.Fatal("set SLUICE_API_KEY_SECRET (at least 16 bytes), the same on every instance")
	}
	proxies, err := tierapi.ParseProxies(*trusted)
	if err != nil {
		log.Fatal(err)
	}
	fm, err := sluice.ParseFailureMode(*mode)
	if err != nil {
		log.Fatal(err)
	}
	st, err := stack.Open(nil, stack.Options{RedisURL: *redisURL, FailureMode: fm, Logger: logger, Sampling: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	o := tierapi.Options{Limiter: st.Limiter(), Secret: []byte(secret), TrustedProxies: proxies, Logger: logger}
	if err := tierapi.Run(*addr, o); err != nil {
		log.Fatal(err)
	}
}
