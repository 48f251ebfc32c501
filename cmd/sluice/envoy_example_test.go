package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
)

// exampleDir is deploy/envoy, the Envoy example.
var exampleDir = filepath.Join("..", "..", "deploy", "envoy")

// envoyRequest is what the example's rate limit actions read from a request.
type envoyRequest struct {
	remoteAddr string
	headers    map[string]string // lower-case names; ":path" is the path
}

// exampleDescriptors are the descriptors deploy/envoy/envoy.yaml makes Envoy send for r,
// written out as its opening comment lists them.
func exampleDescriptors(r envoyRequest) []*ratelimitv3.RateLimitDescriptor {
	ds := []*ratelimitv3.RateLimitDescriptor{
		descriptor("remote_address", r.remoteAddr),
		descriptor("remote_address", r.remoteAddr, "path", r.headers[":path"]),
		descriptor("path", r.headers[":path"]),
	}
	if k, ok := r.headers["x-api-key"]; ok {
		ds = append(ds, descriptor("api_key", k))
	}
	return ds
}

// loadEnvoyExample parses envoy.yaml as an Envoy v3 bootstrap, validates it as Envoy's
// own proto rules say, and returns its route's rate limits and its rate limit filter.
func loadEnvoyExample(t *testing.T) (*bootstrapv3.Bootstrap, []*routev3.RateLimit, *ratelimitfilterv3.RateLimit) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(exampleDir, "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		t.Fatalf("envoy.yaml is not an Envoy v3 bootstrap: %v", err)
	}
	if err := bs.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := bs.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatalf("envoy.yaml: the listener's first filter: %v", err)
	}
	if err := hcm.ValidateAll(); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	var rl *ratelimitfilterv3.RateLimit
	for _, f := range hcm.GetHttpFilters() {
		if f.GetName() == "envoy.filters.http.ratelimit" {
			rl = &ratelimitfilterv3.RateLimit{}
			if err := f.GetTypedConfig().UnmarshalTo(rl); err != nil {
				t.Fatal(err)
			}
			if err := rl.ValidateAll(); err != nil {
				t.Fatalf("envoy.yaml: %v", err)
			}
		}
	}
	if rl == nil {
		t.Fatal("envoy.yaml has no envoy.filters.http.ratelimit filter")
	}
	return &bs, hcm.GetRouteConfig().GetVirtualHosts()[0].GetRateLimits(), rl
}

// applyActions is what Envoy does with a route's rate limits: one descriptor per entry
// whose actions all produce an entry (the two kinds the example uses).
func applyActions(t *testing.T, limits []*routev3.RateLimit, r envoyRequest) []*ratelimitv3.RateLimitDescriptor {
	t.Helper()
	var ds []*ratelimitv3.RateLimitDescriptor
next:
	for _, l := range limits {
		d := &ratelimitv3.RateLimitDescriptor{}
		for _, a := range l.GetActions() {
			switch {
			case a.GetRemoteAddress() != nil:
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "remote_address", Value: r.remoteAddr})
			case a.GetRequestHeaders() != nil:
				h := a.GetRequestHeaders()
				v, ok := r.headers[h.GetHeaderName()]
				if !ok {
					continue next // Envoy sends no descriptor when a header is absent
				}
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: h.GetDescriptorKey(), Value: v})
			default:
				t.Fatalf("envoy.yaml uses an action this test does not model: %v", a)
			}
		}
		ds = append(ds, d)
	}
	return ds
}

// TestEnvoyExample: deploy/envoy/envoy.yaml is a valid Envoy bootstrap whose rate limit
// filter asks sluice's gRPC port for domain "edge", failing open after 50ms, and whose
// actions produce the descriptors exampleDescriptors writes out. `sluice serve` with the
// example's configuration (deploy/envoy/sluice), on memory and on Redis, gives those
// descriptors the answers the configuration's comments document.
func TestEnvoyExample(t *testing.T) {
	bs, limits, rl := loadEnvoyExample(t)
	if rl.GetDomain() != "edge" || rl.GetFailureModeDeny() || rl.GetTimeout().AsDuration() != 50*time.Millisecond ||
		rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() != "sluice" {
		t.Errorf("rate limit filter: domain %q, failure_mode_deny %v, timeout %v, cluster %q; want edge, false, 50ms, sluice",
			rl.GetDomain(), rl.GetFailureModeDeny(), rl.GetTimeout().AsDuration(), rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName())
	}
	for _, c := range bs.GetStaticResources().GetClusters() {
		if c.GetName() == "sluice" {
			if p := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(); p != 8081 {
				t.Errorf("cluster sluice: port %d, want sluice's gRPC port 8081", p)
			}
		}
	}
	for _, r := range []envoyRequest{
		{"203.0.113.7", map[string]string{":path": "/login"}},
		{"203.0.113.7", map[string]string{":path": "/v1/items", "x-api-key": "k-123"}},
	} {
		got, want := applyActions(t, limits, r), exampleDescriptors(r)
		if !reflect.DeepEqual(descriptorStrings(got), descriptorStrings(want)) {
			t.Errorf("for %v envoy.yaml sends\n  %v\nthe test writes out\n  %v", r, descriptorStrings(got), descriptorStrings(want))
		}
	}

	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			args := []string{"--config", filepath.Join(exampleDir, "sluice"), "--log-level", "warn"}
			if store == "redis" {
				// The example runs at serve's default deadline, 5ms, which a decision under
				// -race on two loaded cores can miss (it is then failed open, limit_remaining
				// 0). The example's descriptors and limits are what this test checks, so it
				// gives the store time to decide every request.
				args = append(args, "--redis", redistest.Start(t).URL(), "--deadline", "2s")
			}
			// The shipped example's limits are Envoy's fixed windows, aligned to the minute,
			// and the test counts six logins in one: serve decides on a stopped clock in the
			// middle of a minute, so that no window ends during the test. (The example is
			// what is tested, so its algorithm stays.)
			atVirtualTime(t, clocktest.MidHour.Add(30*time.Second))
			_, grpcAddr, _ := started(t, args...)
			rls := rlsClient(t, grpcAddr)
			if store == "redis" {
				// The example's deadline is 5ms: until the store has connected and loaded
				// its scripts, decisions fail open (limit_remaining 0). Wait for the store.
				warm := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: exampleDescriptors(envoyRequest{"192.0.2.250", map[string]string{":path": "/warm-up"}})}
				poll.Until(t, 10*time.Second, "the Redis store deciding", func() bool {
					resp, err := rls.ShouldRateLimit(context.Background(), warm)
					return err == nil && len(resp.GetStatuses()) > 0 && resp.GetStatuses()[0].GetLimitRemaining() > 0
				})
			}
			ask := func(r envoyRequest) *rlsv3.RateLimitResponse {
				t.Helper()
				resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: exampleDescriptors(r)})
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			type answer struct {
				code      rlsv3.RateLimitResponse_Code
				limit     uint32 // requests per unit; 0: no limit applies
				unit      rlsv3.RateLimitResponse_RateLimit_Unit
				remaining uint32
			}
			answers := func(resp *rlsv3.RateLimitResponse) []answer {
				var as []answer
				for _, s := range resp.GetStatuses() {
					as = append(as, answer{s.GetCode(), s.GetCurrentLimit().GetRequestsPerUnit(), s.GetCurrentLimit().GetUnit(), s.GetLimitRemaining()})
				}
				return as
			}
			const (
				ok, over    = rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
				sec, minute = rlsv3.RateLimitResponse_RateLimit_SECOND, rlsv3.RateLimitResponse_RateLimit_MINUTE
			)
			// Logins: 5 per minute per client address; the sixth is over the limit. The
			// per-address (50/s) and per-path (1000/s) limits count each of them too.
			// The clock is stopped, so no per-second window ends between two requests, and
			// the denied sixth spends nothing of them.
			login := envoyRequest{"203.0.113.7", map[string]string{":path": "/login"}}
			for i := range 6 {
				resp := ask(login)
				as := answers(resp)
				if len(as) != 3 {
					t.Fatalf("login %d: %d statuses, want 3: %v", i+1, len(as), resp)
				}
				wantCode, wantLogin := ok, answer{ok, 5, minute, uint32(4 - i)}
				if i == 5 {
					wantCode, wantLogin = over, answer{over, 5, minute, 0}
				}
				if resp.GetOverallCode() != wantCode || as[1] != wantLogin {
					t.Fatalf("login %d: overall %v, login status %+v; want %v, %+v", i+1, resp.GetOverallCode(), as[1], wantCode, wantLogin)
				}
				if d := resp.GetStatuses()[1].GetDurationUntilReset().AsDuration(); d != 30*time.Second {
					t.Fatalf("login %d: the minute resets in %v, want 30s (serve's clock is stopped at its middle)", i+1, d)
				}
				spent := uint32(min(i+1, 5))
				if as[0] != (answer{ok, 50, sec, 50 - spent}) || as[2] != (answer{ok, 1000, sec, 1000 - spent}) {
					t.Fatalf("login %d: per-address %+v and per-path %+v, want 50/s and 1000/s, both OK with %d spent", i+1, as[0], as[2], spent)
				}
			}
			// Another address logs in afresh.
			if as := answers(ask(envoyRequest{"198.51.100.9", map[string]string{":path": "/login"}})); as[1] != (answer{ok, 5, minute, 4}) {
				t.Errorf("login from another address: %+v, want 4 of 5 per minute left", as[1])
			}
			// Health checks: never limited by path; [address, /healthz] matches nothing.
			resp := ask(envoyRequest{"192.0.2.1", map[string]string{":path": "/healthz"}})
			if as := answers(resp); resp.GetOverallCode() != ok || len(as) != 3 || as[1] != (answer{ok, 0, 0, 0}) || as[2] != (answer{ok, 0, 0, math.MaxUint32}) {
				t.Errorf("/healthz: %v, want OK with no limit for [address, path] and unlimited for [path]", resp)
			}
			// An API key: 100 per minute per key, counted apart from the address.
			for i := range 2 {
				resp := ask(envoyRequest{"192.0.2.1", map[string]string{":path": "/v1/items", "x-api-key": "k-123"}})
				as := answers(resp)
				if resp.GetOverallCode() != ok || len(as) != 4 || as[3] != (answer{ok, 100, minute, uint32(99 - i)}) {
					t.Fatalf("API key request %d: %v, want OK and %d of 100 per minute left for the key", i+1, resp, 99-i)
				}
			}
		})
	}
}

func descriptorStrings(ds []*ratelimitv3.RateLimitDescriptor) []string {
	var out []string
	for _, d := range ds {
		s := ""
		for _, e := range d.GetEntries() {
			s += "[" + e.GetKey() + "=" + e.GetValue() + "]"
		}
		out = append(out, s)
	}
	return out
}

// TestEnvoyCompose: deploy/envoy/compose.yaml runs what the example needs, consistently:
// sluice built from the Dockerfile with serve flags that exist, its configuration
// directory mounted where --config points and Redis under the service name --redis
// names; Envoy with envoy.yaml, reaching sluice under the name and gRPC port of
// envoy.yaml's cluster, its listener port published. (Running it needs a container
// registry for the Envoy, Redis and Go images: not run here.)
func TestEnvoyCompose(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(exampleDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image string `yaml:"image"`
			Build struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
			Command []string `yaml:"command"`
			Volumes []string `yaml:"volumes"`
			Ports   []string `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	sl, envoy := compose.Services["sluice"], compose.Services["envoy"]
	if _, ok := compose.Services["redis"]; !ok || sl.Command == nil || envoy.Command == nil {
		t.Fatalf("compose.yaml: services %v, want redis, sluice and envoy with commands", compose.Services)
	}
	// mounts maps a service's container paths to the files they mount.
	mounts := func(volumes []string) map[string]string {
		m := map[string]string{}
		for _, v := range volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				t.Fatalf("compose.yaml: volume %q is not SOURCE:TARGET", v)
			}
			src := filepath.Join(exampleDir, parts[0])
			if _, err := os.Stat(src); err != nil {
				t.Errorf("compose.yaml: volume %q: %v", v, err)
			}
			m[parts[1]] = src
		}
		return m
	}

	// sluice: built from deploy/Dockerfile; every flag one serve has.
	if _, err := os.Stat(filepath.Join(exampleDir, sl.Build.Context, sl.Build.Dockerfile)); err != nil || sl.Build.Dockerfile != "deploy/Dockerfile" {
		t.Errorf("compose.yaml: sluice builds %s in %s (%v), want deploy/Dockerfile", sl.Build.Dockerfile, sl.Build.Context, err)
	}
	_, help, _ := runCmd(t, "serve", "--help")
	flags := map[string]string{}
	if sl.Command[0] != "serve" {
		t.Errorf("compose.yaml: sluice runs %v, want serve", sl.Command)
	}
	for i := 1; i < len(sl.Command); i++ {
		f := sl.Command[i]
		if !strings.HasPrefix(f, "--") || !strings.Contains(help, f+" ") {
			t.Errorf("compose.yaml: sluice serve has no flag %q", f)
			continue
		}
		if i+1 < len(sl.Command) && !strings.HasPrefix(sl.Command[i+1], "--") {
			flags[f] = sl.Command[i+1]
			i++
		}
	}
	if src := mounts(sl.Volumes)[flags["--config"]]; src != filepath.Join(exampleDir, "sluice") {
		t.Errorf("compose.yaml: --config %s is not the mounted deploy/envoy/sluice (mounts %v)", flags["--config"], sl.Volumes)
	}
	if !strings.HasPrefix(flags["--redis"], "redis://redis:") {
		t.Errorf("compose.yaml: --redis %q, want the redis service", flags["--redis"])
	}

	// Envoy: runs envoy.yaml, reaches sluice as its cluster says, publishes its listener.
	bs, _, _ := loadEnvoyExample(t)
	var cfg string
	for i, a := range envoy.Command {
		if a == "-c" && i+1 < len(envoy.Command) {
			cfg = envoy.Command[i+1]
		}
	}
	if src := mounts(envoy.Volumes)[cfg]; src != filepath.Join(exampleDir, "envoy.yaml") {
		t.Errorf("compose.yaml: envoy runs -c %q, which is not the mounted envoy.yaml (mounts %v)", cfg, envoy.Volumes)
	}
	for _, c := range bs.GetStaticResources().GetClusters() {
		if c.GetName() != "sluice" {
			continue
		}
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		if _, ok := compose.Services[sa.GetAddress()]; !ok || sa.GetPortValue() != 8081 {
			t.Errorf("envoy.yaml's cluster sluice is %s:%d, want a compose service on sluice's gRPC port 8081", sa.GetAddress(), sa.GetPortValue())
		}
	}
	listener := bs.GetStaticResources().GetListeners()[0].GetAddress().GetSocketAddress().GetPortValue()
	if want := fmt.Sprintf("%d:%d", listener, listener); !slices.Contains(envoy.Ports, want) {
		t.Errorf("compose.yaml: envoy publishes %v, want %s (envoy.yaml's listener)", envoy.Ports, want)
	}
}
