package config_test

import (
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/config"
)

// An envoyproxy/ratelimit file is read unchanged and matched as the reference matches it.
func ExampleDomain_Match() {
	cfg, err := config.Parse(config.File{Name: "edge.yaml", Data: []byte(`
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /healthz
    rate_limit: {unlimited: true}
`)})
	if err != nil {
		log.Fatal(err)
	}
	d, _ := cfg.Domain("edge")
	matches, _ := d.Match([]config.Descriptor{
		{Entries: []config.Entry{{Key: "remote_address", Value: "50.0.0.1"}}},
		{Entries: []config.Entry{{Key: "remote_address", Value: "50.0.0.5"}}},
		{Entries: []config.Entry{{Key: "path", Value: "/healthz"}}},
		{Entries: []config.Entry{{Key: "path", Value: "/other"}}},
	})
	for _, m := range matches {
		fmt.Printf("%v %q\n", m.Status, m.Key)
	}
	fmt.Println(matches[0].Limit)
	// Output:
	// limited "envoy/edge/remote_address=50.0.0.1"
	// blocked "envoy/edge/remote_address=50.0.0.5"
	// unlimited ""
	// no_match ""
	// 10/1s fixed_window
}

// A sluice policy with tiers and routes.
func ExamplePolicy_LimitFor() {
	cfg, err := config.Parse(config.File{Name: "policies.yaml", Data: []byte(`
policies:
  - name: api
    key: {type: api_key, header: X-API-Key}
    tier_header: X-Plan
    default_tier: free
    tiers:
      free: {rate: 60, period: minute}
      pro: {rate: 600, period: minute}
    routes:
      "POST /v1/items": {rate: 10, period: minute}
`)})
	if err != nil {
		log.Fatal(err)
	}
	p, _ := cfg.Policy("api")
	fmt.Println(p.LimitFor("some-key-digest", "pro"))
	fmt.Println(p.LimitFor("some-key-digest", ""))
	r, ok := p.Route(httptest.NewRequest("POST", "/v1/items", nil))
	fmt.Println(r.Pattern, r.Limit, ok)
	// Output:
	// 600/1m0s gcra tier:pro
	// 60/1m0s gcra tier:free
	// POST /v1/items 10/1m0s gcra true
}

// Validation errors name the file, line, column and field; all of them come at once.
func ExampleErrorList() {
	_, err := config.Parse(config.File{Name: "policies.yaml", Data: []byte(`policies:
  - name: api
    rate: 0
    period: fortnight
    burts: 5
`)})
	for _, e := range config.ErrorList(err) {
		fmt.Println(e)
	}
	// Output:
	// policies.yaml:5:5: policies[0].burts: unknown field (known fields: name, algorithm, rate, period, zone, anchor_day, burst, lease, key, shadow, failure_mode, local_share, expected_nodes, tier_header, default_tier, tiers, identity_tiers, routes, overrides, settle, criticality)
	// policies.yaml:3:11: policies[0].rate: must be positive, got 0
	// policies.yaml:4:13: policies[0].period: want a duration such as 1s, 1m or 24h, or one of second, minute, hour, day, week; got "fortnight"
}

// A Watcher keeps the configuration current; an invalid edit is rejected and the old
// configuration stays.
func ExampleNewWatcher() {
	dir, _ := os.MkdirTemp("", "sluice-config")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "policies.yaml")
	os.WriteFile(path, []byte("policies:\n  - {name: p, rate: 5, period: 1s}\n"), 0o644)

	w, err := config.NewWatcher(path, config.WithDebounce(time.Hour), config.WithOnError(func(err error) {
		fmt.Println("rejected:", len(config.ErrorList(err)), "error(s)")
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	os.WriteFile(path, []byte("policies:\n  - {name: p, rate: -5, period: 1s}\n"), 0o644)
	err = w.Reload() // what a SIGHUP handler does
	p, _ := w.Config().Policy("p")
	fmt.Println(err != nil, p.Limit)
	// Output:
	// rejected: 1 error(s)
	// true 5/1s gcra
}
