// Package tierapi is the small API shared by the tiers-memory and tiers-redis examples: a
// catalogue and an order endpoint behind per-tier rate limits. Only the store differs
// between the two programs.
package tierapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keys"
)

// DemoKeys are the API keys the demo accepts, and their tiers. A real service keeps only
// the keys' MACs (keys.Hasher.Sum) in its database, as Handler does with these.
var DemoKeys = map[string]string{
	"demo-free-key":       "free",
	"demo-pro-key":        "pro",
	"demo-enterprise-key": "enterprise",
}

// Options configures Handler.
type Options struct {
	// Limiter is the store (memory or Redis).
	Limiter sluice.Limiter
	// Secret keys the API-key HMAC; every instance sharing a store needs the same one.
	Secret []byte
	// TrustedProxies are the load balancers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// Logger receives the rate limiter's decisions.
	Logger *slog.Logger
}

// Handler returns the API with its rate limits:
//
//	per-ip      every request, by client IP: 20/s, bursts of 40
//	per-key     every request with an API key, by tier: free 10/min, pro 100/min,
//	            enterprise 1000/min (partition key sent in the headers)
//	orders      POST /v1/orders, by API key and tier: free 2/min, pro 20/min,
//	            enterprise 200/min
//	daily       shadow: free 500/day, pro 50000/day, measured and logged, not enforced nor
//	            advertised in the headers
//
// The rate limiter runs before authentication, so guessing API keys is limited per IP,
// and unknown keys (no tier) are never stored.
func Handler(o Options) (http.Handler, error) {
	hasher, err := keys.NewHasher(o.Secret, keys.Hex)
	if err != nil {
		return nil, err
	}
	tiers := make(map[string]string, len(DemoKeys)) // MAC -> tier
	for raw, tier := range DemoKeys {
		tiers[hasher.Sum(raw)] = tier
	}
	apiKey := httplimit.Header("X-API-Key")
	tierOf := func(r *http.Request) string {
		if k := apiKey(r); k != "" {
			return tiers[hasher.Sum(k)]
		}
		return ""
	}
	byKey := httplimit.ByAPIKey(hasher, apiKey)
	perMinute := func(n int64) sluice.Limit {
		return sluice.Limit{Algorithm: sluice.SlidingWindow, Rate: n, Period: time.Minute}
	}
	mw, err := httplimit.New(httplimit.Config{
		Limiter: o.Limiter,
		Logger:  o.Logger,
		Tier:    tierOf,
		Policies: []httplimit.Policy{
			{Name: "per-ip", Key: httplimit.ByIP(&keys.ClientIP{TrustedProxies: o.TrustedProxies}),
				Limit: sluice.PerSecond(20).WithBurst(40)},
			{Name: "per-key", Key: byKey, PartitionKey: true, Tiers: map[string]sluice.Limit{
				"free": perMinute(10), "pro": perMinute(100), "enterprise": perMinute(1000)}},
			{Name: "orders", Route: "POST /v1/orders", Key: byKey, Tiers: map[string]sluice.Limit{
				"free": perMinute(2), "pro": perMinute(20), "enterprise": perMinute(200)}},
			{Name: "daily", Key: byKey, Shadow: true, Tiers: map[string]sluice.Limit{
				"free": sluice.PerDay(500).With(sluice.SlidingWindow), "pro": sluice.PerDay(50000).With(sluice.SlidingWindow)}},
		},
	})
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, []map[string]any{{"id": 1, "name": "sluice gate"}, {"id": 2, "name": "weir"}})
	})
	mux.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, map[string]any{"id": r.PathValue("id")})
	})
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusCreated, map[string]any{"status": "accepted", "tier": tierOf(r)})
	})
	// Rate limit first, then authenticate.
	return mw.Handler(authenticate(tierOf, mux)), nil
}

// authenticate refuses requests whose API key is missing or unknown.
func authenticate(tierOf func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tierOf(r) == "" {
			w.Header().Set("WWW-Authenticate", `APIKey header="X-API-Key"`)
			reply(w, http.StatusUnauthorized, map[string]string{"error": "missing or unknown X-API-Key"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		fmt.Println("tierapi: writing response:", err)
	}
}

// ParseProxies parses the comma-separated CIDRs of a -trusted-proxies flag ("" is none).
func ParseProxies(s string) ([]netip.Prefix, error) {
	if s == "" {
		return nil, nil
	}
	return keys.ParsePrefixes(strings.Split(s, ",")...)
}

// Run serves the API that Handler builds from o on addr, as Serve does.
func Run(addr string, o Options) error {
	h, err := Handler(o)
	if err != nil {
		return err
	}
	return Serve(addr, h, o.Logger)
}

// Serve runs h on addr until SIGINT or SIGTERM, then drains requests for up to 10 seconds.
func Serve(addr string, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	logger.Info("listening", "addr", addr)
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
