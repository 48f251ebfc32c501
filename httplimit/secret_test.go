package httplimit

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/stack"
)

const rawAPIKey = "sk_live_RAWSECRET_0123456789"

// leakSurface drives API-key-limited traffic through every path that writes headers or
// logs (allowed, denied, shadow in the headers, override, partition keys, legacy headers) and returns
// all response headers and bodies, the log output, and the MAC of rawAPIKey.
func leakSurface(t *testing.T, lim sluice.Limiter) (responses, logs, mac string) {
	t.Helper()
	hasher, err := keys.NewHasher([]byte("test-secret-0123456789abcdef"), keys.Hex)
	if err != nil {
		t.Fatal(err)
	}
	var logBuf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	byKey := ByAPIKey(hasher, Header("X-API-Key"))
	byBearer := ByAPIKey(hasher, BearerToken)
	m := mustNew(t, Config{
		Limiter:       lim,
		Logger:        logger,
		LegacyHeaders: true,
		ShadowHeaders: true,
		Tier:          func(*http.Request) string { return "free" },
		Policies: []Policy{
			{Name: "per-key", Key: byKey, PartitionKey: true,
				Tiers:     map[string]sluice.Limit{"free": sluice.PerHour(3)},
				Overrides: map[keys.Identity]sluice.Limit{hasher.Identity("someone-else"): sluice.PerHour(1000)}},
			{Name: "bearer", Key: byBearer, PartitionKey: true, Limit: sluice.PerHour(100)},
			{Name: "shadow", Key: byKey, Shadow: true, PartitionKey: true,
				Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Rate: 1, Period: time.Hour}},
			{Name: "route", Route: "GET /items/{id}", Key: byKey, PartitionKey: true, Limit: sluice.PerHour(50)},
		},
	})
	srv := httptest.NewServer(m.Handler(okHandler))
	defer srv.Close()

	var out strings.Builder
	statuses := map[int]int{}
	for i := range 5 {
		req, _ := http.NewRequest("GET", srv.URL+"/items/"+string(rune('a'+i)), nil)
		req.Header.Set("X-API-Key", rawAPIKey)
		req.Header.Set("Authorization", "Bearer "+rawAPIKey)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		statuses[resp.StatusCode]++
		resp.Header.Write(&out)
		// Byte Sequences are base64 on the wire: scan their decoded bytes too.
		for _, name := range []string{"RateLimit", "RateLimit-Policy"} {
			for _, it := range parseList(t, resp.Header, name) {
				if pk, ok := it.params["pk"].([]byte); ok {
					out.WriteString("\npk " + string(pk) + "\n")
				}
			}
		}
		var body bytes.Buffer
		body.ReadFrom(resp.Body)
		resp.Body.Close()
		out.Write(body.Bytes())
	}
	if statuses[200] != 3 || statuses[429] != 2 {
		t.Fatalf("statuses %v, want 3×200 and 2×429", statuses)
	}
	return out.String(), logBuf.String(), hasher.Sum(rawAPIKey)
}

// TestRawAPIKeyNeverLeaksMemory scans every key that reached the production stack on
// memory (no layer rewrites keys), every log line (the middleware's and the stack's
// decision log) and every response header and body for the raw API key.
func TestRawAPIKeyNeverLeaksMemory(t *testing.T) {
	var stackLogs bytes.Buffer
	clk := clocktest.New(start)
	st := openStack(t, "", stack.Options{Clock: clk.Now, Sampling: 1,
		Logger: slog.New(slog.NewJSONHandler(&stackLogs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	rec := &recorder{Limiter: st.Limiter()}
	responses, logs, mac := leakSurface(t, rec)
	if !strings.Contains(stackLogs.String(), "rate limit decision") {
		t.Errorf("the stack logged no decision; the scan of its log proved nothing:\n%s", stackLogs.String())
	}
	logs += stackLogs.String()
	storeKeys := strings.Join(rec.keys, "\n")
	for what, text := range map[string]string{"store keys": storeKeys, "logs": logs, "responses": responses} {
		if strings.Contains(text, rawAPIKey) {
			t.Errorf("the raw API key appears in the %s:\n%s", what, text)
		}
	}
	// The scan must have seen the identity, in its hashed form, in each place.
	if !strings.Contains(storeKeys, mac) || !strings.Contains(logs, mac) || !strings.Contains(logs, "would deny") {
		t.Errorf("the MAC %s is missing from the store keys or logs; the scan proved nothing\nkeys:\n%s\nlogs:\n%s", mac, storeKeys, logs)
	}
	if !strings.Contains(responses, "Ratelimit:") || !strings.Contains(responses, "pk api_key:"+mac) {
		t.Errorf("responses carry no RateLimit partition keys; the scan proved nothing:\n%s", responses)
	}
}
