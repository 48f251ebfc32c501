package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/overload"
)

func TestOverloadBlock(t *testing.T) {
	c, err := Parse(File{Name: "o.yaml", Data: []byte(`overload:
  min_limit: 8
  max_limit: 400
  initial_limit: 40
  window: 250ms
  min_samples: 20
  long_window: 300
  tolerance: 100
  headroom: 3
  remeasure: 30s
  critical_reserve: 0
  default_reserve: 30
  max_wait: off
  max_queue: 64
  criticality_header: X-Criticality
  default_criticality: sheddable
policies:
  - name: api
    rate: 100
    period: 1s
    criticality: default
    routes:
      "POST /pay":
        rate: 10
        period: 1s
        criticality: critical
      "GET /report":
        rate: 10
        period: 1s
`)})
	if err != nil {
		t.Fatal(err)
	}
	want := overload.Config{MinLimit: 8, MaxLimit: 400, InitialLimit: 40, Window: 250 * time.Millisecond, MinSamples: 20,
		LongWindow: 300, Tolerance: 100, Headroom: 3, Remeasure: 30 * time.Second, CriticalReserve: -1, DefaultReserve: 30,
		MaxWait: -1, MaxQueue: 64}
	o := c.Overload
	if o == nil {
		t.Fatal("no overload block")
	}
	if !reflect.DeepEqual(o.Limiter, want) {
		t.Errorf("limiter config %+v, want %+v", o.Limiter, want)
	}
	if err := o.Limiter.Validate(); err != nil {
		t.Errorf("the block's config does not validate: %v", err)
	}
	if o.CriticalityHeader != "X-Criticality" || o.DefaultCriticality != overload.Sheddable || o.Pos.Line != 1 {
		t.Errorf("criticality_header %q default_criticality %v at %v", o.CriticalityHeader, o.DefaultCriticality, o.Pos)
	}
	p, _ := c.Policy("api")
	if p.Criticality == nil || *p.Criticality != overload.Default {
		t.Errorf("policy criticality %v, want default", p.Criticality)
	}
	if r := p.Routes[0]; r.Criticality == nil || *r.Criticality != overload.Critical {
		t.Errorf("route %s criticality %v, want critical", r.Pattern, r.Criticality)
	}
	if r := p.Routes[1]; r.Criticality != nil {
		t.Errorf("route %s criticality %v, want unset", r.Pattern, *r.Criticality)
	}

	dump, err := c.Dump()
	if err != nil {
		t.Fatal(err)
	}
	var view struct {
		Overload map[string]any `json:"overload"`
		Policies []struct {
			Criticality string `json:"criticality"`
			Routes      []struct {
				Criticality string `json:"criticality"`
			} `json:"routes"`
		} `json:"policies"`
	}
	if err := json.Unmarshal(dump, &view); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"min_limit": 8.0, "max_limit": 400.0, "window": "250ms", "remeasure": "30s", "critical_reserve": 0.0,
		"default_reserve": 30.0, "max_wait": "off", "headroom": "3", "criticality_header": "X-Criticality", "default_criticality": "sheddable"} {
		if view.Overload[k] != v {
			t.Errorf("dump: overload.%s = %v, want %v", k, view.Overload[k], v)
		}
	}
	if pv := view.Policies[0]; pv.Criticality != "default" || pv.Routes[0].Criticality != "critical" || pv.Routes[1].Criticality != "" {
		t.Errorf("dump: criticalities %+v", pv)
	}
}

// An empty block is the overload package's defaults; a file without one has none.
func TestOverloadDefaults(t *testing.T) {
	c, err := Parse(File{Name: "o.yaml", Data: []byte("overload: {}\n")})
	if err != nil {
		t.Fatal(err)
	}
	if c.Overload == nil || !reflect.DeepEqual(c.Overload.Limiter, overload.Config{}) || c.Overload.DefaultCriticality != overload.Default {
		t.Errorf("empty block: %+v", c.Overload)
	}
	dump, _ := c.Dump()
	var view struct {
		Overload map[string]any `json:"overload"`
	}
	json.Unmarshal(dump, &view)
	if view.Overload["max_limit"] != float64(overload.DefaultMaxLimit) || view.Overload["critical_reserve"] != float64(overload.DefaultCriticalReserve) ||
		view.Overload["max_wait"] != "4× long-term latency" {
		t.Errorf("dump of the defaults: %v", view.Overload)
	}
	c2, err := Parse(File{Name: "p.yaml", Data: []byte("policies:\n  - name: a\n    rate: 1\n    period: 1s\n")})
	if err != nil {
		t.Fatal(err)
	}
	if c2.Overload != nil {
		t.Errorf("no block: %+v", c2.Overload)
	}
}

func TestOverloadSameLimit(t *testing.T) {
	parse := func(name, block string) *Overload {
		c, err := Parse(File{Name: name, Data: []byte(block)})
		if err != nil {
			t.Fatal(err)
		}
		return c.Overload
	}
	a := parse("a.yaml", "overload:\n  max_limit: 100\n")
	moved := parse("b.yaml", "# moved\n\noverload:\n  max_limit: 100\n")
	header := parse("a.yaml", "overload:\n  max_limit: 100\n  criticality_header: X-C\n  default_criticality: sheddable\n")
	changed := parse("a.yaml", "overload:\n  max_limit: 101\n")
	switch {
	case !a.SameLimit(moved):
		t.Error("the same block elsewhere does not set the same limit")
	case !a.SameLimit(header):
		t.Error("a block that changes only where criticality comes from does not set the same limit")
	case a.SameLimit(changed), a.SameLimit(nil):
		t.Error("a changed block sets the same limit")
	case !(*Overload)(nil).SameLimit(nil):
		t.Error("no block is not the same as no block")
	}
}

// docs/overload.md's worked example is examples/overload/sluice.yaml, and it loads.
func TestOverloadDocExample(t *testing.T) {
	file, err := os.ReadFile(filepath.Join("..", "examples", "overload", "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "overload.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```yaml\n")
	block, _, _ = strings.Cut(block, "```")
	if !ok || block != string(file) {
		t.Fatalf("docs/overload.md's yaml block is not examples/overload/sluice.yaml:\n%s", block)
	}
	c, err := Parse(File{Name: "sluice.yaml", Data: file})
	if err != nil {
		t.Fatal(err)
	}
	if c.Overload == nil || c.Overload.Limiter.DefaultReserve != 10 || c.Overload.CriticalityHeader != "X-Criticality" {
		t.Errorf("the example's overload block: %+v", c.Overload)
	}
	if err := c.Overload.Limiter.Validate(); err != nil {
		t.Error(err)
	}
}
