package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/internal/redistest"
)

// rawCodec sends a request's bytes as they are (*[]byte), as a peer that does not check
// UTF-8 would, and decodes answers with proto.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

// bytesDomain: a login limit per address, and a limit per API key.
const bytesDomain = `domain: edge
descriptors:
  - key: remote_address
    descriptors:
      - key: path
        value: /login
        rate_limit: {algorithm: gcra, unit: hour, requests_per_unit: 5}
  - key: api_key
    rate_limit: {algorithm: gcra, unit: hour, requests_per_unit: 3}
`

// TestRLSAnyBytes: through serve, on memory and on Redis, a ShouldRateLimit whose
// descriptor values are not UTF-8 (Envoy forwards header bytes as they came) is decided
// like any other, each value as its bytes: the login limit holds (5 of 20), and API keys
// that differ only in bytes that are not UTF-8, or in their replacement character, never
// share a counter. The JSON API refuses such values (400) rather than merge them. Before,
// the call failed with Internal, which an Envoy that fails open allows.
func TestRLSAnyBytes(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(bytesDomain), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--config", dir}
			if store == "redis" {
				// A deadline a loaded machine meets: a decision failed open would be
				// counted as allowed.
				args = append(args, "--redis", redistest.Start(t).URL(), "--deadline", "2s", "--failure-mode", "closed")
			}
			base, grpcAddr, _ := started(t, args...)
			conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			call := func(descs ...*ratelimitv3.RateLimitDescriptor) rlsv3.RateLimitResponse_Code {
				t.Helper()
				// Strings hold "\x01" where the request has the byte 0xf1: proto.Marshal
				// writes only UTF-8, so the bytes are put in after.
				b, err := proto.Marshal(&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs})
				if err != nil {
					t.Fatal(err)
				}
				b = bytes.ReplaceAll(b, []byte{1}, []byte{0xf1})
				resp := new(rlsv3.RateLimitResponse)
				if err := conn.Invoke(context.Background(), "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", &b, resp); err != nil {
					t.Fatalf("ShouldRateLimit %q: %v", b, err)
				}
				return resp.OverallCode
			}
			ok := 0
			for i := range 20 {
				if call(descriptor("remote_address", "192.0.2.1", "path", "/login"), descriptor("api_key", fmt.Sprint("Espa\x01a-", i))) == rlsv3.RateLimitResponse_OK {
					ok++
				}
			}
			if ok != 5 {
				t.Errorf("login with an API key that is not UTF-8: %d of 20 allowed, want 5", ok)
			}
			// "Espa\xf1a", "Espa\xc3\xb1a" (ñ) and "Espa\xef\xbf\xbda" (U+FFFD): three keys,
			// three counters of 3.
			for _, key := range []string{"Espa\x01a", "Espa\u00f1a", "Espa\uFFFDa"} {
				ok := 0
				for range 5 {
					if call(descriptor("api_key", key)) == rlsv3.RateLimitResponse_OK {
						ok++
					}
				}
				if ok != 3 {
					t.Errorf("api_key %q: %d of 5 allowed, want its own 3", key, ok)
				}
			}

			for _, body := range []string{
				"{\"domain\":\"edge\",\"descriptors\":[{\"entries\":[{\"key\":\"api_key\",\"value\":\"Espa\xf1a\"}]}]}",
				`{"domain":"edge","descriptors":[{"entries":[{"key":"api_key","value":"Espa\udc00a"}]}]}`,
			} {
				rp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				msg, _ := io.ReadAll(rp.Body)
				rp.Body.Close()
				if rp.StatusCode != 400 || !strings.Contains(string(msg), "not Unicode text") {
					t.Errorf("/v1/check %q: %d %s, want 400 naming the encoding", body, rp.StatusCode, msg)
				}
			}
		})
	}
}
