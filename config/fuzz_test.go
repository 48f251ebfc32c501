package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse parses a sluice policy file and an envoyproxy/ratelimit domain file of any
// content: Parse never panics, a rejection lists at least one problem, and every problem
// names its file and a line in it (file:line), as a service's operator needs to fix it;
// only a file without content is named alone.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"builtin/sluice.yaml", "builtin/envoy-demo.yaml"} {
		if b, err := builtinFS.ReadFile(name); err == nil {
			f.Add(b, []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
		}
	}
	if paths, _ := filepath.Glob("testdata/*.yaml"); len(paths) > 0 {
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b, []byte(nil))
			}
		}
	}
	f.Add([]byte("policies:\n  - name: p\n    rate: -1\n"), []byte("domain: [\n"))
	f.Add([]byte("policies: {a: 1}\nstore: {deadline: x}\n"), []byte("domain: d\ndescriptors:\n  - key: k\n    descriptors: [{key: k}]\n"))
	f.Fuzz(func(t *testing.T, policies, domain []byte) {
		if len(policies)+len(domain) > 1<<16 {
			return // outside the target's domain: nothing to check
		}
		names := []string{"policies.yaml", "domain.yaml"}
		cfg, err := Parse(File{Name: names[0], Data: policies}, File{Name: names[1], Data: domain})
		if err == nil {
			if cfg == nil {
				t.Fatal("no configuration and no error")
			}
			return
		}
		list := ErrorList(err)
		if len(list) == 0 {
			t.Fatalf("a rejection without a configuration error: %v", err)
		}
		for _, e := range list {
			if e.Pos.File != names[0] && e.Pos.File != names[1] {
				t.Errorf("problem names no file of the configuration: %q", e.Error())
			}
			// Only a file without a YAML document (blank, or comments only) may be named
			// alone.
			if e.Pos.Line < 1 && e.Msg != "file is empty" {
				t.Errorf("problem names no line: %q", e.Error())
			}
			if !strings.HasPrefix(e.Error(), e.Pos.String()+": ") {
				t.Errorf("problem does not start with file:line: %q", e.Error())
			}
		}
	})
}
