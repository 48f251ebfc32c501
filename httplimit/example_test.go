package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/httplimit"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/observe"
	"github.com/sluicehq/sluice/overload"
	"github.com/sluicehq/sluice/stack"
)

func Example() {
	// The production stack (decision log and metrics, deny cache, and on Redis failover)
	// on the in-memory store; stack.Options{RedisURL: ...} keeps limits in Redis. A fixed
	// clock keeps the output stable; production code leaves Clock nil.
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := stack.Open(nil, stack.Options{Clock: func() time.Time { return now }})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// Believe X-Forwarded-For only from the load balancers.
	proxies, err := keys.ParsePrefixes("10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	clientIP := &keys.ClientIP{TrustedProxies: proxies}

	mw, err := httplimit.New(httplimit.Config{
		Limiter: st.Limiter(),
		Policies: []httplimit.Policy{
			{Name: "per-client", Limit: sluice.PerMinute(2), Key: httplimit.ByIP(clientIP)},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	h := mw.Handler(mux)

	for range 3 {
		r := httptest.NewRequest("GET", "/hello", nil)
		r.RemoteAddr = "10.1.2.3:41000" // a load balancer
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
		if w.Code == http.StatusTooManyRequests {
			fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
			fmt.Print(w.Body)
		}
	}
	// Output:
	// 200 "per-client";q=2;w=60 "per-client";r=1;t=30
	// 200 "per-client";q=2;w=60 "per-client";r=0;t=60
	// 429 "per-client";q=2;w=60 "per-client";r=0;t=30
	// Retry-After: 30
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"Retry after 30 seconds.","violated-policies":["per-client"]}
}

// Tiers and API keys: each API key is limited by its tier, and the raw key is replaced by
// its HMAC before it reaches the store, a log line or a header.
func Example_tiers() {
	st, err := stack.Open(nil, stack.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	hasher, err := keys.NewHasher([]byte("load-me-from-a-secret-store-32by"), keys.Hex)
	if err != nil {
		log.Fatal(err)
	}
	tierOf := map[string]string{"key-free": "free", "key-pro": "pro"} // your key database
	mw, err := httplimit.New(httplimit.Config{
		Limiter: st.Limiter(),
		Tier:    func(r *http.Request) string { return tierOf[r.Header.Get("X-API-Key")] },
		Policies: []httplimit.Policy{{
			Name: "per-key",
			Key:  httplimit.ByAPIKey(hasher, httplimit.Header("X-API-Key")),
			Tiers: map[string]sluice.Limit{
				"free": sluice.PerHour(100),
				"pro":  sluice.PerHour(10000),
			},
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.NotFoundHandler())
	for _, key := range []string{"key-free", "key-pro"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// "per-key";q=100;w=3600
	// "per-key";q=10000;w=3600
}

// An overload limit in front of the handlers: a limit of 2 requests in flight, half of it
// kept for critical requests, so a sheddable request is shed while one request is in
// flight and a critical one is still admitted. Reports are sheddable, payments critical;
// a trusted load balancer may say otherwise in X-Criticality.
func Example_overload() {
	st, err := stack.Open(nil, stack.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	proxies, _ := keys.ParsePrefixes("10.0.0.0/8")
	clientIP := &keys.ClientIP{TrustedProxies: proxies}
	lim, err := overload.New(overload.Config{MinLimit: 2, MaxLimit: 2, CriticalReserve: 50, MaxWait: -1})
	if err != nil {
		log.Fatal(err)
	}
	metrics, err := observe.NewOverloadMetrics(prometheus.NewRegistry(), func() (overload.Stats, bool) { return lim.Stats(), true })
	if err != nil {
		log.Fatal(err)
	}

	var h http.Handler
	send := func(method, target string) {
		r := httptest.NewRequest(method, target, nil)
		r.RemoteAddr = "198.51.100.7:41000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == http.StatusServiceUnavailable {
			fmt.Println(method, target, w.Code, "Retry-After:", w.Header().Get("Retry-After"), w.Header().Get("Content-Type"))
			return
		}
		fmt.Println(method, target, w.Code)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /reports/", func(w http.ResponseWriter, r *http.Request) {
		// While this report is in flight, another one and a payment arrive.
		send("GET", "/reports/2")
		send("POST", "/pay")
	})
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {})

	mw, err := httplimit.New(httplimit.Config{
		Limiter: st.Limiter(),
		Trust:   clientIP,
		Policies: []httplimit.Policy{
			{Name: "per-client", Limit: sluice.PerMinute(100), Key: httplimit.ByIP(clientIP)},
			{Name: "reports", Route: "/reports/", Limit: sluice.PerMinute(10), Key: httplimit.ByIP(clientIP),
				Criticality: new(overload.Sheddable)},
			{Name: "pay", Route: "POST /pay", Limit: sluice.PerMinute(10), Key: httplimit.ByIP(clientIP),
				Criticality: new(overload.Critical)},
		},
		Overload:    lim,
		Criticality: httplimit.TrustedCriticality(clientIP, "X-Criticality"),
		OnOverload:  metrics.Observe,
	})
	if err != nil {
		log.Fatal(err)
	}
	h = mw.Handler(mux)
	send("GET", "/reports/1")
	fmt.Printf("%+v\n", lim.Stats())
	// Output:
	// GET /reports/2 503 Retry-After: 1 application/problem+json
	// POST /pay 200
	// GET /reports/1 200
	// {Limit:2 InFlight:0 Queued:0}
}
