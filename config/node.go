package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// decoder walks yaml.Node trees and collects every problem of a file with its position.
type decoder struct {
	file  string
	errs  Errors
	warns Errors // accepted, as envoyproxy/ratelimit accepts them, but likely mistakes
	envoy bool   // an envoyproxy/ratelimit file: misplaced reference fields are ignored
}

func (d *decoder) pos(n *yaml.Node) Position {
	if n == nil {
		return Position{File: d.file}
	}
	return Position{File: d.file, Line: n.Line, Column: n.Column}
}

func (d *decoder) errorf(n *yaml.Node, field, format string, args ...any) {
	d.errs = append(d.errs, &Error{Pos: d.pos(n), Field: field, Msg: fmt.Sprintf(format, args...)})
}

// warnf records a warning (Config.Warnings).
func (d *decoder) warnf(n *yaml.Node, field, format string, args ...any) {
	d.warns = append(d.warns, &Error{Pos: d.pos(n), Field: field, Msg: fmt.Sprintf(format, args...)})
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// maxScanLines bounds the files syntaxError scans line by line.
const maxScanLines = 5000

// syntaxError returns the message of the YAML parser's error err on data, and the
// position of the line at fault: the first line at which the file's beginning fails to
// parse with the same message (the parser names where the construct began, or no line),
// at that line's first character.
func (d *decoder) syntaxError(data []byte, err error) (string, Position) {
	// split returns the parser's message and the line it names, if any.
	split := func(err error) (string, int) {
		if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			return m[2], line
		}
		return strings.TrimPrefix(err.Error(), "yaml: "), 0
	}
	msg, line := split(err)
	if line == 0 {
		line = max(1, bytes.Count(bytes.TrimRight(data, "\n"), []byte("\n"))+1)
	}
	pos := Position{File: d.file, Line: line}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxScanLines {
		return msg, pos
	}
	end := 0
	for i, l := range lines {
		end += len(l)
		var n yaml.Node
		if perr := yaml.Unmarshal(data[:end], &n); perr == nil {
			continue
		} else if pmsg, _ := split(perr); pmsg == msg {
			pos.Line = i + 1
			pos.Column = len(l) - len(bytes.TrimLeft(l, " \t")) + 1
			break
		}
	}
	return msg, pos
}

// parse returns the content node of the single YAML document in data, or nil after
// recording an error.
func (d *decoder) parse(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf(nil, "", "file is empty")
			return nil
		}
		msg, pos := d.syntaxError(data, err)
		d.errs = append(d.errs, &Error{Pos: pos, Msg: "invalid YAML: " + msg, Err: err})
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.errorf(&extra, "", "a file holds one YAML document; found another")
		return nil
	}
	if len(doc.Content) == 0 {
		d.errorf(nil, "", "file is empty")
		return nil
	}
	return deref(doc.Content[0])
}

// deref follows aliases (*anchor) to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

// pair is one key: value of a mapping.
type pair struct {
	key, val *yaml.Node
}

// object is a decoded mapping: its entries in file order, and by key.
type object struct {
	node   *yaml.Node
	path   string
	pairs  []pair
	fields map[string]pair
}

func (o *object) get(name string) (*yaml.Node, bool) {
	p, ok := o.fields[name]
	if !ok || isNull(p.val) {
		return nil, false
	}
	return p.val, true
}

func (o *object) has(name string) bool { _, ok := o.get(name); return ok }

func (o *object) field(name string) string { return join(o.path, name) }

// object checks that n is a mapping (null is empty) of plain keys, each at most once and,
// when known is given, among known; nil, after recording an error, when n is no mapping.
func (d *decoder) object(n *yaml.Node, path string, known ...string) *object {
	n = deref(n)
	o := &object{node: n, path: path, fields: map[string]pair{}}
	if isNull(n) {
		return o
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "must be a mapping, got %s", describe(n))
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		name := k.Value
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "keys must be plain strings, got %s", describe(k))
			continue
		}
		if known != nil && !slices.Contains(known, name) {
			if d.envoy && slices.Contains(referenceKeys, name) {
				// The reference checks keys against one list for the whole file and
				// ignores a known key where it does not belong: a warning here.
				d.warnf(k, join(path, name), "is not a field here (known fields: %s): ignored, as envoyproxy/ratelimit ignores it", strings.Join(known, ", "))
				d.referenceKeysIn(v, join(path, name))
				continue
			}
			d.errorf(k, join(path, name), "unknown field (known fields: %s)", strings.Join(known, ", "))
			continue
		}
		if prev, dup := o.fields[name]; dup {
			d.errorf(k, join(path, name), "duplicate key (first at line %d)", prev.key.Line)
			continue
		}
		o.fields[name] = pair{k, v}
		o.pairs = append(o.pairs, pair{k, v})
	}
	return o
}

// pairs returns the entries of a mapping of any keys in file order, as object checks them.
func (d *decoder) pairs(n *yaml.Node, path string) []pair {
	if o := d.object(n, path); o != nil {
		return o.pairs
	}
	return nil
}

// referenceKeys is every field name of envoyproxy/ratelimit's format (its validKeys,
// src/config/config_impl.go), wherever it appears.
var referenceKeys = []string{
	"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
	"unlimited", "shadow_mode", "quota_mode", "name", "replaces", "detailed_metric",
	"value_to_metric", "share_threshold",
}

// referenceKeysIn checks an ignored value as the reference does: mappings' keys among
// referenceKeys, lists of mappings only.
func (d *decoder) referenceKeysIn(n *yaml.Node, path string) {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if !slices.Contains(referenceKeys, k.Value) {
				d.errorf(k, join(path, k.Value), "unknown field")
				continue
			}
			d.referenceKeysIn(n.Content[i+1], join(path, k.Value))
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			if deref(e).Kind != yaml.MappingNode {
				d.errorf(e, index(path, i), "must be a mapping, got %s", describe(e))
				continue
			}
			d.referenceKeysIn(e, index(path, i))
		}
	}
}

// seq returns the items of a sequence; null is empty.
func (d *decoder) seq(n *yaml.Node, path string) []*yaml.Node {
	n = deref(n)
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, path, "must be a list, got %s", describe(n))
		return nil
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		out[i] = deref(c)
	}
	return out
}

// str returns a scalar as a string: any scalar, as the reference reads 123; null is "".
func (d *decoder) str(n *yaml.Node, path string) (string, bool) {
	n = deref(n)
	if isNull(n) {
		return "", true
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "must be a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// scalar decodes a scalar tagged one of tags as T, reporting otherwise that n must be what.
func scalar[T any](d *decoder, n *yaml.Node, path, what string, tags ...string) (T, bool) {
	var v T
	if n.Kind != yaml.ScalarNode || !slices.Contains(tags, n.Tag) {
		d.errorf(n, path, "must be %s, got %s", what, describe(n))
		return v, false
	}
	if err := n.Decode(&v); err != nil {
		d.errorf(n, path, "must be %s, got %q", what, n.Value)
		return *new(T), false
	}
	return v, true
}

// integer returns an integer scalar in [lo, hi].
func (d *decoder) integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	n = deref(n)
	v, ok := scalar[int64](d, n, path, "an integer", "!!int")
	if !ok {
		return 0, false
	}
	if v < lo || v > hi {
		switch {
		case lo == 1 && v < lo:
			d.errorf(n, path, "must be positive, got %d", v)
		case lo == 0 && v < lo:
			d.errorf(n, path, "must not be negative, got %d", v)
		default:
			d.errorf(n, path, "must be between %d and %d, got %d", lo, hi, v)
		}
		return 0, false
	}
	return v, true
}

// number returns a float scalar (an integer is accepted too).
func (d *decoder) number(n *yaml.Node, path string) (float64, bool) {
	return scalar[float64](d, deref(n), path, "a number", "!!float", "!!int")
}

func (d *decoder) boolean(n *yaml.Node, path string) (bool, bool) {
	n = deref(n)
	if isNull(n) {
		return false, true
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		// YAML 1.1 booleans, which the reference implementation's YAML library accepts.
		switch strings.ToLower(n.Value) {
		case "yes", "on", "y":
			return true, true
		case "no", "off", "n":
			return false, true
		}
	}
	return scalar[bool](d, n, path, "true or false", "!!bool")
}

// duration parses a Go duration ("1.5s", "250ms") with a positive value.
func (d *decoder) duration(n *yaml.Node, path string) (time.Duration, bool) {
	s, ok := d.str(n, path)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		d.errorf(n, path, "must be a positive duration such as 5ms or 1s, got %q", s)
		return 0, false
	}
	return v, true
}

// periodIn returns a reader of periods, as [ParsePeriod] reads them, in [lo, hi] (hi 0:
// no upper bound), for read.
func (d *decoder) periodIn(lo, hi time.Duration) func(*yaml.Node, string) (time.Duration, bool) {
	return func(n *yaml.Node, path string) (time.Duration, bool) {
		s, ok := d.str(n, path)
		if !ok {
			return 0, false
		}
		p, err := ParsePeriod(s)
		switch {
		case err != nil:
			d.errorf(n, path, "%v", err)
		case p < lo:
			d.errorf(n, path, "must be at least %v", lo)
		case hi > 0 && p > hi:
			d.errorf(n, path, "must be at most %v", hi)
		default:
			return p, true
		}
		return 0, false
	}
}

// describe names what n is in an error message.
func describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind != yaml.ScalarNode:
		return "an unsupported YAML node"
	case n.Tag == "!!null":
		return "nothing"
	case n.Tag == "!!str":
		return strconv.Quote(n.Value)
	}
	return n.Value
}

var plainName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_\-]*$`)

// join appends a field name to a path: "policies[2]" + "rate" = "policies[2].rate";
// names that are not plain identifiers are quoted: routes["GET /x"].
func join(path, name string) string {
	if !plainName.MatchString(name) {
		return path + "[" + strconv.Quote(name) + "]"
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// read sets *dst to o's field name, read by parse, when the field is set, and reports
// whether it is.
func read[T any](o *object, name string, dst *T, parse func(*yaml.Node, string) (T, bool)) bool {
	v, ok := o.get(name)
	if ok {
		*dst, _ = parse(v, o.field(name))
	}
	return ok
}

// intIn returns a reader of integers in [lo, hi], for read.
func intIn[T ~int | ~int64](d *decoder, lo, hi int64) func(*yaml.Node, string) (T, bool) {
	return func(n *yaml.Node, path string) (T, bool) {
		v, ok := d.integer(n, path, lo, hi)
		return T(v), ok
	}
}
