package conformance

import (
	"bytes"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/bench/internal/reference"
	"github.com/sluicehq/sluice/config"
)

var configMutants = flag.Int("conformance-configs", 150, "mutated configurations TestReferenceConfigValidation checks")

// TestReferenceConfigValidation checks that sluice accepts exactly the
// envoyproxy/ratelimit configuration files the reference accepts. It mutates
// conformanceConfig at random (removed, added and retyped fields, duplicated descriptors,
// invalid units and numbers, unlimited beside a unit, empty keys, bad replaces, ...),
// has the reference's own checker (config_check_cmd) and config.Parse judge each result,
// and reports every file one accepts and the other rejects, except the differences
// docs/configuration.md lists. sluice's warnings (a rate_limit without
// requests_per_unit, a replaces name that matches nothing) are not rejections: the
// reference accepts those files silently.
func TestReferenceConfigValidation(t *testing.T) {
	spec := *referenceFlag
	if fi, err := os.Stat(spec); err == nil && !fi.IsDir() {
		spec = "" // a service binary was given: the checker comes from reference.Version
	}
	check, err := reference.Install(spec, reference.ConfigCheck)
	if err != nil {
		t.Fatalf("envoyproxy/ratelimit's config checker is needed and could not be built: %v", err)
	}
	var base yaml.Node
	if err := yaml.Unmarshal([]byte(conformanceConfig), &base); err != nil {
		t.Fatal(err)
	}
	seed := testSeed()
	rng := rand.New(rand.NewPCG(seed, 31))
	t.Logf("seed %d", seed)

	judge := func(doc []byte) (refOK, sluiceOK bool, refSays, sluiceSays string) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "c.yaml"), doc, 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd := exec.Command(check, "-config_dir", dir)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("running the reference's checker: %v", err)
		}
		_, perr := config.Parse(config.File{Name: "c.yaml", Data: doc})
		if perr != nil {
			sluiceSays = perr.Error()
		}
		return err == nil, perr == nil, lastLine(out.String()), sluiceSays
	}

	if refOK, sluiceOK, refSays, sluiceSays := judge([]byte(conformanceConfig)); !refOK || !sluiceOK {
		t.Fatalf("the unmutated configuration: reference ok %v (%s), sluice ok %v (%s)", refOK, refSays, sluiceOK, sluiceSays)
	}
	var accepted, rejected, mismatches int
	ops := map[string]int{}
	for i := 0; i < *configMutants; i++ {
		doc := cloneNode(&base)
		var applied []string
		for range 1 + rng.IntN(2) {
			applied = append(applied, mutate(rng, doc))
		}
		for _, a := range applied {
			ops[a]++
		}
		data, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		refOK, sluiceOK, refSays, sluiceSays := judge(data)
		if refOK {
			accepted++
		} else {
			rejected++
		}
		if refOK != sluiceOK {
			mismatches++
			if mismatches <= 10 {
				t.Errorf("mutations %v: the reference accepts it: %v (%s); sluice accepts it: %v (%s)\n%s", applied, refOK, refSays, sluiceOK, sluiceSays, data)
			}
		}
	}
	t.Logf("%d mutated files: the reference accepted %d and rejected %d; %d judged differently; mutations %v", *configMutants, accepted, rejected, mismatches, ops)
	if accepted == 0 || rejected < *configMutants/4 {
		t.Errorf("%d accepted and %d rejected: the mutations do not cover both outcomes", accepted, rejected)
	}
}

func lastLine(s string) string {
	b := bytes.TrimSpace([]byte(s))
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}

func cloneNode(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = nil
	for _, k := range n.Content {
		c.Content = append(c.Content, cloneNode(k))
	}
	return &c
}

// descriptorMaps returns the mapping nodes of every descriptor in doc, with the sequence
// node holding each.
func descriptorMaps(doc *yaml.Node) (maps, lists []*yaml.Node) {
	var walk func(list *yaml.Node)
	walk = func(list *yaml.Node) {
		if list == nil || list.Kind != yaml.SequenceNode {
			return
		}
		for _, d := range list.Content {
			if d.Kind != yaml.MappingNode {
				continue
			}
			maps, lists = append(maps, d), append(lists, list)
			walk(field(d, "descriptors"))
		}
	}
	walk(field(doc.Content[0], "descriptors"))
	return maps, lists
}

// field returns the value node of key in mapping m, or nil.
func field(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func setField(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// mutate changes doc once, at random, and names what it did.
func mutate(rng *rand.Rand, doc *yaml.Node) string {
	top := doc.Content[0]
	maps, lists := descriptorMaps(doc)
	var limits []*yaml.Node
	for _, d := range maps {
		if rl := field(d, "rate_limit"); rl != nil && rl.Kind == yaml.MappingNode {
			limits = append(limits, rl)
		}
	}
	if len(maps) == 0 || len(limits) == 0 {
		setField(top, "domain", scalar(pick(rng, []string{"", "other"})))
		return "domain"
	}
	switch rng.IntN(16) {
	case 0: // drop a field of a descriptor or of a rate_limit
		m := pick(rng, append(append([]*yaml.Node{}, maps...), limits...))
		if len(m.Content) >= 2 {
			i := 2 * rng.IntN(len(m.Content)/2)
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
		}
		return "drop field"
	case 1: // an unknown key
		m := pick(rng, append(append([]*yaml.Node{top}, maps...), limits...))
		setField(m, pick(rng, []string{"bogus", "rate_limits", "Key", "unit"}), scalar("1"))
		return "unknown key"
	case 2:
		setField(pick(rng, limits), "unit", scalar(pick(rng, []string{"second", "HOUR", "Minute", "week", "month", "fortnight", "", "7", "seconds"})))
		return "unit"
	case 3:
		setField(pick(rng, limits), "requests_per_unit", scalar(pick(rng, []string{"-1", "abc", "1.5", "0", "4294967295", "4294967296", "10", "0x10", ""})))
		return "requests_per_unit"
	case 4: // a descriptor twice at one level
		i := rng.IntN(len(maps))
		l := lists[i]
		l.Content = append(l.Content, cloneNode(maps[i]))
		return "duplicate descriptor"
	case 5:
		setField(pick(rng, limits), "unlimited", scalar(pick(rng, []string{"true", "false", "yes", "on"})))
		return "unlimited"
	case 6:
		setField(pick(rng, maps), pick(rng, []string{"key", "value"}), scalar(""))
		return "empty key or value"
	case 7:
		rl := pick(rng, limits)
		name := pick(rng, []string{"", "app_limit", "nothing", "self"})
		if name == "self" {
			name = "me"
			setField(rl, "name", scalar(name))
		}
		r := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{scalar("name"), scalar(name)}}
		setField(rl, "replaces", &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{r}})
		return "replaces"
	case 8:
		setField(pick(rng, maps), pick(rng, []string{"shadow_mode", "quota_mode"}), scalar(pick(rng, []string{"true", "yes", "maybe", "1", "False"})))
		return "shadow_mode or quota_mode"
	case 9:
		setField(top, "domain", scalar(pick(rng, []string{"", "other", "a b"})))
		return "domain"
	case 10:
		m := pick(rng, append([]*yaml.Node{top}, maps...))
		setField(m, "descriptors", pick(rng, []*yaml.Node{scalar("x"), {Kind: yaml.MappingNode, Content: []*yaml.Node{scalar("key"), scalar("k")}}, {Kind: yaml.SequenceNode}}))
		return "descriptors not a list"
	case 11:
		setField(pick(rng, maps), "share_threshold", scalar(pick(rng, []string{"true", "false"})))
		return "share_threshold"
	case 12:
		d := pick(rng, maps)
		setField(d, "key", scalar("prefix*"))
		return "key wildcard"
	case 13:
		setField(pick(rng, maps), pick(rng, []string{"detailed_metric", "value_to_metric"}), scalar(pick(rng, []string{"true", "notabool"})))
		return "metric flags"
	case 14:
		setField(pick(rng, limits), "name", scalar(pick(rng, []string{"app_limit", "n1", ""})))
		return "name"
	default:
		setField(pick(rng, maps), "rate_limit", pick(rng, []*yaml.Node{scalar("5"), {Kind: yaml.SequenceNode}, {Kind: yaml.MappingNode}}))
		return "rate_limit retyped"
	}
}
