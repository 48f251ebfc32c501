package server_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/stack"
)

// fuzzServer is the service on the memory stack with the test configuration (testdata:
// sluice policies and envoyproxy/ratelimit domains), as `sluice serve` runs it.
func fuzzServer(f *testing.F) *server.Server {
	cfg, err := config.Load("testdata")
	if err != nil {
		f.Fatal(err)
	}
	st, err := stack.Open(cfg, stack.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	s, err := server.New(server.Options{Limiter: st.Limiter(), Config: cfg})
	if err != nil {
		f.Fatal(err)
	}
	return s
}

// FuzzCheckAPI posts any body to the JSON API's decision endpoints: the answer is never a
// 5xx (the memory store cannot fail, so a 5xx would be input turned into a server error)
// and is always JSON (a decision or a problem).
func FuzzCheckAPI(f *testing.F) {
	for _, body := range []string{
		`{"policy":"per-ip","key":"203.0.113.7"}`,
		`{"policy":"per-ip","key":"2001:db8::1","cost":3}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.5"}]}]}`,
		`{"domain":"edge","descriptors":[{"entries":[{"key":"message_type","value":"marketing"},{"key":"to_number","value":"+1"}]}],"cost":-1}`,
		`{"policy":"nope"}`, `{}`, `[]`, `{"policy":"per-ip","key":"x"}{}`, `{"policy":1}`,
	} {
		f.Add(uint8(0), []byte(body))
		f.Add(uint8(1), []byte(body))
	}
	s := fuzzServer(f)
	h := s.Handler()
	paths := []string{"/v1/check", "/v1/peek"}
	f.Fuzz(func(t *testing.T, path uint8, body []byte) {
		req := httptest.NewRequest(http.MethodPost, paths[int(path)%len(paths)], bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q: %d %s", req.URL.Path, body, rec.Code, rec.Body.String())
		}
		if ct := rec.Header().Get("Content-Type"); !strings.Contains(ct, "json") {
			t.Fatalf("%s %q: %d with Content-Type %q", req.URL.Path, body, rec.Code, ct)
		}
	})
}

// envoyRequest decodes fuzz input into a rate limit request: descriptors separated by
// 0xff, entries by 0xfe, key and value by the first '='.
func envoyRequest(domain string, raw []byte, hits uint8) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: uint32(hits % 8)}
	for _, d := range bytes.Split(raw, []byte{0xff}) {
		desc := &ratelimitv3.RateLimitDescriptor{}
		for _, e := range bytes.Split(d, []byte{0xfe}) {
			k, v, _ := strings.Cut(string(e), "=")
			desc.Entries = append(desc.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, desc)
	}
	return req
}

// FuzzEnvoy sends any descriptors to the Envoy rate limit handler, matching them against
// the test domains: it never panics, never answers with an RPC error other than
// InvalidArgument (Envoy fails open on errors, so any other error is a bypass), and a
// response has one status per descriptor, none reporting more remaining than its limit.
func FuzzEnvoy(f *testing.F) {
	f.Add("edge", []byte("remote_address=50.0.0.5"), uint8(1))
	f.Add("edge", []byte("remote_address=10.1.2.3\xffremote_address=203.0.113.9"), uint8(0))
	f.Add("edge", []byte("message_type=marketing\xfeto_number=+15551234"), uint8(2))
	f.Add("edge", []byte("api=x\xfe=\xff"), uint8(1))
	f.Add("unknown", []byte("a=b"), uint8(1))
	f.Add("", []byte("a=b"), uint8(1))
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, domain string, raw []byte, hits uint8) {
		req := envoyRequest(domain, raw, hits)
		resp, err := s.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("domain %q, descriptors %q: %v", domain, raw, err)
			}
			return
		}
		if len(resp.Statuses) != len(req.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(req.Descriptors))
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK && resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("overall code %v", resp.OverallCode)
		}
		for i, st := range resp.Statuses {
			if cl := st.GetCurrentLimit(); cl != nil && st.LimitRemaining > cl.RequestsPerUnit {
				t.Fatalf("descriptor %d: %d remaining of a limit of %d", i, st.LimitRemaining, cl.RequestsPerUnit)
			}
		}
	})
}
