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
// Redis keys hold the API keys' HMAC, never the keys. A client over its limit is answered
// from its denial, without a Redis call, until the denial could change (package
// denycache). When Redis is unreachable the API answers 503 with Retry-After (fail
// closed); wrap the store in a failover decorator, under the deny cache, to fail open or
// fall back to a local limit instead.
package main

import (
	"flag"
	"log"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/denycache"
	"github.com/sluicehq/sluice/examples/internal/tierapi"
	"github.com/sluicehq/sluice/redisstore"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "listen address")
	redisURL := flag.String("redis", "redis://localhost:6379", "Redis URL (standalone, Sentinel or Cluster; see package redisstore)")
	trusted := flag.String("trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed")
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
	store, err := redisstore.Open(*redisURL, redisstore.WithLogger(logger))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	h, err := tierapi.Handler(tierapi.Options{
		Limiter:        denycache.New(store),
		Secret:         []byte(secret),
		TrustedProxies: proxies,
		Logger:         logger,
	})
	if err != nil {
		log.Fatal(err)
	}

	if err := tierapi.Serve(*addr, h, logger); err != nil {
		log.Fatal(err)
	}
}
