package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// hardDomain is issue 20's scenario: a per-user rule on "vip*" values and a per-address
// rule, decided together.
const hardDomain = `domain: hard
descriptors:
  - key: user
    value: "vip*"
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// longUser is a descriptor value of 48 KiB of the bytes every layer escapes.
var longUser = "vip" + strings.Repeat("%=/{}:", 8<<10)

// metricValue returns the sum of the samples of the named metric on base's /metrics.
func metricValue(t *testing.T, base, name string) float64 {
	t.Helper()
	body := httpGet(t, base+"/metrics")
	var sum float64
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	for _, m := range re.FindAllStringSubmatch(body, -1) {
		var v float64
		json.Unmarshal([]byte(m[2]), &v)
		sum += v
	}
	return sum
}

// TestServeOverlongDescriptorValueIsDecided: a call carrying [remote_address=A] and
// [user=vip+48 KiB of %=/{}:] is never an error, over gRPC and JSON, on memory and Redis:
// the first 5 calls pass, the 6th is over A's limit; nothing is counted as a store error
// or logged at ERROR.
func TestServeOverlongDescriptorValueIsDecided(t *testing.T) {
	for _, st := range pipelineStores[:2] {
		t.Run(st.name, func(t *testing.T) {
			cfg := writeConfig(t, "hard.yaml", hardDomain)
			base, grpcAddr, log := started(t, append(append([]string{"--config", cfg}, pipelineFlags...), st.flags(t)...)...)
			rls := rlsClient(t, grpcAddr)
			for i := range 7 {
				resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "hard",
					Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "A"), descriptor("user", longUser)}})
				if err != nil {
					t.Fatalf("gRPC call %d: %v", i, err)
				}
				want := rlsv3.RateLimitResponse_OK
				if i >= 5 {
					want = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if resp.OverallCode != want || resp.Statuses[0].Code != want {
					t.Fatalf("gRPC call %d: %v, want %v", i, resp.OverallCode, want)
				}
			}
			body, _ := json.Marshal(map[string]any{"domain": "hard", "descriptors": []any{
				map[string]any{"entries": []any{map[string]string{"key": "remote_address", "value": "B"}}},
				map[string]any{"entries": []any{map[string]string{"key": "user", "value": longUser}}},
			}})
			for i := range 7 {
				rp, err := http.Post(base+"/v1/check", "application/json", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				out, _ := io.ReadAll(rp.Body)
				rp.Body.Close()
				want := 200
				if i >= 5 {
					want = 429
				}
				if rp.StatusCode != want {
					t.Fatalf("JSON call %d: %d, want %d: %s", i, rp.StatusCode, want, out)
				}
			}
			if n := metricValue(t, base, "sluice_server_store_errors_total") + metricValue(t, base, "sluice_store_errors_total"); n != 0 {
				t.Errorf("%v store errors counted", n)
			}
			if strings.Contains(log.String(), "ERROR") {
				t.Errorf("an ERROR was logged:\n%.2000s", log.String())
			}
		})
	}
}
