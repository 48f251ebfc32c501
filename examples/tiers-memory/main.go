// Command tiers-memory runs a small API with per-tier rate limits on the in-process store.
//
//	go run ./examples/tiers-memory
//	curl -i -H 'X-API-Key: demo-free-key' -X POST localhost:8080/v1/orders   # 3 times: 201, 201, 429
//
// The demo keys are demo-free-key, demo-pro-key and demo-enterprise-key. Limits live in
// this process only; see tiers-redis for limits shared by several instances.
package main

import (
	"crypto/rand"
	"flag"
	"log"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/examples/internal/tierapi"
	"github.com/sluicehq/sluice/stack"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "listen address")
	trusted := flag.String("trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For is believed")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	proxies, err := tierapi.ParseProxies(*trusted)
	if err != nil {
		log.Fatal(err)
	}
	// The stack `sluice serve` runs on memory (package stack): bounded memory whatever
	// the traffic, a deny cache and decision logs.
	st, err := stack.Open(nil, stack.Options{MaxKeys: 1_000_000, Logger: logger, Sampling: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	o := tierapi.Options{Limiter: st.Limiter(), Secret: secret(logger), TrustedProxies: proxies, Logger: logger}
	if err := tierapi.Run(*addr, o); err != nil {
		log.Fatal(err)
	}
}

// secret reads the API-key HMAC secret from SLUICE_API_KEY_SECRET; without it, a random
// one is fine for a single in-process store.
func secret(logger *slog.Logger) []byte {
	if s := os.Getenv("SLUICE_API_KEY_SECRET"); s != "" {
		return []byte(s)
	}
	b := make([]byte, 32)
	rand.Read(b)
	logger.Info("SLUICE_API_KEY_SECRET not set: using a random secret for this process")
	return b
}
