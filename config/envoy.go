package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice"
)

// Entry is one key/value pair of a rate limit descriptor. In a file the value may be
// empty or "*" (any value matches) or end in "*" (any value with that prefix).
type Entry struct {
	Key   string
	Value string
}

// Descriptor is one descriptor of an Envoy rate limit request. Override, when not nil
// (RateLimitDescriptor.limit), replaces what the configuration says for it.
type Descriptor struct {
	Entries  []Entry
	Override *LimitOverride
}

// LimitOverride is RateLimitDescriptor.limit: requests_per_unit per unit.
type LimitOverride struct {
	RequestsPerUnit uint32
	Unit            Unit
}

// Domain is one envoyproxy/ratelimit domain: a tree of descriptors with rate limits.
type Domain struct {
	Name string
	// Rules are the descriptors that carry a rate_limit block, depth first in file order.
	Rules []*Rule
	// Pos is where the domain is named.
	Pos Position

	root      *level
	nameNode  *yaml.Node
	keyPrefix string       // "envoy/<domain>" escaped: the start of its counter keys
	quota     *QuotaDomain // the file's quota_buckets, if any
}

// Rule is a descriptor with a rate_limit block.
type Rule struct {
	// Domain is the domain's name.
	Domain string
	// Path is the descriptor entries from the domain down to this rule, as configured.
	Path []Entry
	// FullKey is the reference's name for the rule and its statistics,
	// "domain.key_value.key2"; a limit of a rate_limits list has "#<name>" appended, or
	// "#<index>" when it has no name.
	FullKey string
	// Name and Replaces are rate_limit.name and the names in rate_limit.replaces.
	Name     string
	Replaces []string
	// Unlimited: the rule admits everything without touching the store.
	Unlimited bool
	// Shadow is the descriptor's shadow_mode: decide and count, but always answer OK.
	Shadow bool
	// QuotaMode is the descriptor's quota_mode: like Shadow, never deny; over the limit,
	// answer OK without duration_until_reset.
	QuotaMode bool
	// DetailedMetric is detailed_metric: statistics name the request's values.
	DetailedMetric bool
	// Unit and RequestsPerUnit are as written (UnitUnknown when Unlimited): Envoy's
	// current_limit.
	Unit            Unit
	RequestsPerUnit uint32
	// Limit is the limit that decides: requests_per_unit per unit, by fixed_window or
	// rate_limit.algorithm, or per calendar period (rate_limit.calendar). It is zero when
	// Unlimited or RequestsPerUnit is 0.
	Limit sluice.Limit
	// Calendar is rate_limit.calendar's period, also when Limit is zero.
	Calendar sluice.Calendar
	// Pos is where the rule's rate_limit block is.
	Pos Position

	replacesAt []written // where each of Replaces is written
	suffix     string    // FullKey's "#<name>" or "#<index>" of a rate_limits entry
}

// Blocks reports whether the rule denies every request (requests_per_unit: 0).
func (r *Rule) Blocks() bool { return !r.Unlimited && r.RequestsPerUnit == 0 }

// Status is what a Match asks the caller to do.
type Status uint8

const (
	// NoMatch: no rule applies; answer OK.
	NoMatch Status = iota
	// Limited: decide Match.Limit for Match.Key.
	Limited
	// Unlimited: answer OK without deciding (limit_remaining 4294967295, no
	// current_limit).
	Unlimited
	// Replaced: another matched rule replaces this one (rate_limit.replaces); answer OK
	// without deciding.
	Replaced
	// Blocked: requests_per_unit 0; over the limit without deciding (unless Shadow).
	Blocked
)

var statusNames = [...]string{"no_match", "limited", "unlimited", "replaced", "blocked"}

func (s Status) String() string { return enumName(statusNames[:], s, "status") }

// Match is the outcome of matching one descriptor against one of its limits.
type Match struct {
	// Descriptor is the index of the request's descriptor matched.
	Descriptor int
	Status     Status
	// Rule is the rule that matched (for a LimitOverride, an unnamed one made from it);
	// nil for NoMatch.
	Rule *Rule
	// Limit is Rule.Limit, to be decided when Status is Limited.
	Limit sluice.Limit
	// Key identifies the counter: the domain and the request's entries (a share_threshold
	// wildcard's pattern in place of the value), injectively. Empty for NoMatch,
	// Unlimited and Replaced.
	Key string
	// StatsKey names the rule in metrics: Rule.FullKey, with the request's values where
	// detailed_metric or value_to_metric ask for them.
	StatsKey string
	// Shadow is Rule.Shadow or Rule.QuotaMode: never deny because of this descriptor.
	Shadow bool
}

// ErrInvalidOverride is returned by Domain.Match for a LimitOverride with an unknown unit.
var ErrInvalidOverride = errors.New("config: invalid descriptor limit override")

// Match matches each descriptor of one request, as the reference's ShouldRateLimit does
// (docs/configuration.md): a LimitOverride gives its limit (fixed window, no name), else
// Lookup finds the rules; a named rule whose name a matched rule replaces becomes
// Replaced (unlimited rules never are). The result has one Match per descriptor, in
// order, or one per limit of a rate_limits list, adjacent. The only error, wrapping
// ErrInvalidOverride, is for an override of an unknown unit.
func (d *Domain) Match(descs []Descriptor) ([]Match, error) {
	return d.AppendMatches(nil, descs)
}

// AppendMatches is Match appending to dst; on error it returns dst unchanged.
func (d *Domain) AppendMatches(dst []Match, descs []Descriptor) ([]Match, error) {
	base := len(dst)
	dst = slices.Grow(dst, len(descs))
	var replaced []string // the names the matched rules replace
	var stepBuf [8]step
	for i, desc := range descs {
		if o := desc.Override; o != nil {
			if o.Unit == UnitUnknown || o.Unit.Period() == 0 {
				return dst[:base], fmt.Errorf("%w: descriptor %d has unit %v", ErrInvalidOverride, i, o.Unit)
			}
			r := &Rule{
				Domain:          d.Name,
				Path:            desc.Entries,
				FullKey:         fullKey(d.Name, desc.Entries),
				Unit:            o.Unit,
				RequestsPerUnit: o.RequestsPerUnit,
			}
			if o.RequestsPerUnit > 0 {
				r.Limit = sluice.Limit{Algorithm: sluice.FixedWindow, Rate: int64(o.RequestsPerUnit), Period: o.Unit.Period()}
			}
			dst = append(dst, d.matchOf(i, r, desc.Entries, nil))
			continue
		}
		rules, steps := d.lookup(desc.Entries, stepBuf[:0])
		if rules == nil {
			dst = append(dst, Match{Descriptor: i})
			continue
		}
		for _, r := range rules {
			replaced = append(replaced, r.Replaces...)
			dst = append(dst, d.matchOf(i, r, desc.Entries, steps))
		}
	}
	for i := base; replaced != nil && i < len(dst); i++ {
		m := &dst[i]
		if (m.Status == Limited || m.Status == Blocked) && m.Rule.Name != "" &&
			slices.Contains(replaced, m.Rule.Name) {
			*m = Match{Descriptor: m.Descriptor, Status: Replaced, Rule: m.Rule, StatsKey: m.StatsKey}
		}
	}
	return dst, nil
}

func (d *Domain) matchOf(desc int, r *Rule, entries []Entry, steps []step) Match {
	m := Match{Descriptor: desc, Rule: r, Shadow: r.Shadow || r.QuotaMode, StatsKey: statsKey(d.Name, r, entries, steps)}
	switch {
	case r.Unlimited:
		m.Status = Unlimited
		return m
	case r.RequestsPerUnit == 0:
		m.Status = Blocked
	default:
		m.Status = Limited
		m.Limit = r.Limit
	}
	m.Key = d.counterKey(entries, steps)
	return m
}

// Lookup returns the rule for one descriptor's entries, or nil, by the reference's rules
// (docs/configuration.md); the first of several limits (rate_limits): see LookupAll.
func (d *Domain) Lookup(entries []Entry) *Rule {
	if rs := d.LookupAll(entries); len(rs) > 0 {
		return rs[0]
	}
	return nil
}

// LookupAll is Lookup returning every limit found, in file order.
func (d *Domain) LookupAll(entries []Entry) []*Rule {
	rs, _ := d.lookup(entries, nil)
	return rs
}

// step records how one entry was matched.
type step struct {
	n        *node
	wildcard bool
}

// lookup returns the rules for entries and how each entry matched, appended to buf.
func (d *Domain) lookup(entries []Entry, buf []step) ([]*Rule, []step) {
	lvl, steps := d.root, buf
	var rules []*Rule // the last entry's
	for _, e := range entries {
		if lvl == nil {
			return nil, nil
		}
		n, wild := lvl.find(e)
		if n == nil {
			return nil, nil
		}
		steps = append(steps, step{n, wild})
		lvl, rules = n.children, n.rules
	}
	if rules == nil {
		return nil, nil
	}
	return rules, steps
}

// level is one list of descriptors.
type level struct {
	exact     map[Entry]*node
	wildcards []*node // value ends in '*'; longest prefix first, then file order
	keyOnly   map[string]*node
}

type node struct {
	key, value string
	prefix     string  // wildcards: value without the trailing '*'
	rules      []*Rule // rate_limit, or every limit of rate_limits
	children   *level
	// keyPart is "/<key>=" escaped; valuePart adds the value when every entry matched
	// here writes the same one (exact, share_threshold), else "".
	keyPart, valuePart string
	valueToMetric      bool
	shareThreshold     bool
	line               int
}

// add puts n in l, unless l holds its key and value already: it returns that node then.
func (l *level) add(n *node) *node {
	switch e := (Entry{n.key, n.value}); {
	case n.value == "":
		if prev := l.keyOnly[n.key]; prev != nil {
			return prev
		}
		l.keyOnly[n.key] = n
	case strings.HasSuffix(n.value, "*"):
		if i := slices.IndexFunc(l.wildcards, func(w *node) bool { return w.key == n.key && w.value == n.value }); i >= 0 {
			return l.wildcards[i]
		}
		l.wildcards = append(l.wildcards, n)
	default:
		if prev := l.exact[e]; prev != nil {
			return prev
		}
		l.exact[e] = n
	}
	return nil
}

func (l *level) find(e Entry) (*node, bool) {
	if n := l.exact[e]; n != nil {
		return n, false
	}
	for _, n := range l.wildcards {
		if n.key == e.Key && strings.HasPrefix(e.Value, n.prefix) {
			return n, true
		}
	}
	return l.keyOnly[e.Key], false
}

// fullKey is the reference implementation's descriptorKey: domain.key_value.key.
func fullKey(domain string, entries []Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

func statsKey(domain string, r *Rule, entries []Entry, steps []step) string {
	if steps == nil || !r.DetailedMetric && !slices.ContainsFunc(steps, func(s step) bool { return s.n.valueToMetric }) {
		return r.FullKey
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		s, v := steps[i], steps[i].n.value
		if (r.DetailedMetric || s.n.valueToMetric) && !(s.wildcard && s.n.shareThreshold) {
			v = e.Value
		}
		b.WriteByte('.')
		b.WriteString(e.Key)
		if v != "" {
			b.WriteString("_" + v)
		}
	}
	b.WriteString(r.suffix)
	return b.String()
}

// counterKey is "envoy/<domain>/<key>=<value>/...", each part escaped ('%', '/' and '='
// as %25, %2F, %3D) so that no two different inputs give the same key.
func counterKey(domain string, entries []Entry, steps []step) string {
	n := len("envoy/") + len(domain)
	for _, e := range entries {
		n += 2 + len(e.Key) + len(e.Value)
	}
	var b strings.Builder
	b.Grow(n + 8) // room for a few escapes: one allocation in all
	b.WriteString("envoy/")
	writeEscaped(&b, domain)
	for i, e := range entries {
		v := e.Value
		if i < len(steps) && steps[i].wildcard && steps[i].n.shareThreshold {
			v = steps[i].n.value
		}
		b.WriteByte('/')
		writeEscaped(&b, e.Key)
		b.WriteByte('=')
		writeEscaped(&b, v)
	}
	return b.String()
}

// counterKey is the package's counterKey, with the nodes' parts escaped at load.
func (d *Domain) counterKey(entries []Entry, steps []step) string {
	if d.keyPrefix == "" || len(steps) != len(entries) {
		return counterKey(d.Name, entries, steps)
	}
	n := len(d.keyPrefix)
	for i, s := range steps {
		if s.n.valuePart != "" {
			n += len(s.n.valuePart)
		} else {
			n += len(s.n.keyPart) + len(entries[i].Value)
		}
	}
	var b strings.Builder
	b.Grow(n + 8) // room for a few escapes: one allocation in all
	b.WriteString(d.keyPrefix)
	for i, s := range steps {
		if s.n.valuePart != "" {
			b.WriteString(s.n.valuePart)
			continue
		}
		b.WriteString(s.n.keyPart)
		writeEscaped(&b, entries[i].Value)
	}
	return b.String()
}

// escaped is s as writeEscaped writes it.
func escaped(s string) string {
	var b strings.Builder
	writeEscaped(&b, s)
	return b.String()
}

// writeEscaped writes s with '%', '/' and '=' escaped as %25, %2F and %3D.
func writeEscaped(b *strings.Builder, s string) {
	from := 0 // s[from:i] is plain and not yet written
	for i := 0; i < len(s); i++ {
		var esc string
		switch s[i] {
		case '%':
			esc = "%25"
		case '/':
			esc = "%2F"
		case '=':
			esc = "%3D"
		default:
			continue
		}
		b.WriteString(s[from:i])
		b.WriteString(esc)
		from = i + 1
	}
	b.WriteString(s[from:])
}

// calendarUnits are the calendar periods of the units that have one (rate_limit.calendar).
var calendarUnits = map[Unit]sluice.CalendarUnit{
	UnitDay: sluice.CalendarDay, UnitWeek: sluice.CalendarWeek, UnitMonth: sluice.CalendarMonth, UnitYear: sluice.CalendarYear,
}

// envoyDomain decodes one envoyproxy/ratelimit file.
func (d *decoder) envoyDomain(root *yaml.Node) *Domain {
	o := d.object(root, "", "domain", "descriptors", "quota_buckets")
	if o == nil {
		return nil
	}
	dom := &Domain{}
	dom.nameNode, _ = o.get("domain")
	dom.Name, _ = d.str(dom.nameNode, "domain")
	dom.Pos = d.pos(dom.nameNode)
	dom.keyPrefix = "envoy/" + escaped(dom.Name)
	if dom.Name == "" {
		d.errorf(o.fields["domain"].key, "domain", "must not be empty")
	}
	dom.root = d.descriptors(dom, o, "descriptors", nil)
	// A replaces name that matches nothing replaces nothing, as in the reference: warn.
	for _, r := range dom.Rules {
		for i, name := range r.Replaces {
			if !slices.ContainsFunc(dom.Rules, func(o *Rule) bool { return o.Name == name }) {
				at := r.replacesAt[i]
				d.warnf(at.node, at.field, "no rate_limit in domain %q is named %q: it replaces nothing", dom.Name, name)
			}
		}
		r.replacesAt = nil
	}
	if o.has("quota_buckets") && dom.Name != "" {
		// sluice's own section: its field names are checked strictly.
		d.envoy = false
		dom.quota = d.quotaDomain(dom.Name, o, "quota_buckets")
		d.envoy = true
	}
	return dom
}

var descriptorFields = []string{
	"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "quota_mode",
	"detailed_metric", "value_to_metric", "share_threshold",
}

var rateLimitFields = []string{
	"unit", "requests_per_unit", "unlimited", "name", "replaces",
	"algorithm", "burst", "calendar", "zone", "anchor_day", // sluice extensions
}

// descriptors decodes the descriptor list under o[field] into a level; parent is the entry
// path so far.
func (d *decoder) descriptors(dom *Domain, o *object, field string, parent []Entry) *level {
	v, _ := o.get(field)
	path := o.field(field)
	items := d.seq(v, path)
	if len(items) == 0 {
		return nil
	}
	lvl := &level{exact: map[Entry]*node{}, keyOnly: map[string]*node{}}
	for i, item := range items {
		ipath := index(path, i)
		io := d.object(item, ipath, descriptorFields...)
		if io == nil {
			continue
		}
		n := &node{line: item.Line}
		read(io, "key", &n.key, d.str)
		if n.key == "" {
			d.errorf(item, io.field("key"), "is required")
			continue
		}
		read(io, "value", &n.value, d.str)
		wildcard := strings.HasSuffix(n.value, "*")
		n.prefix = strings.TrimSuffix(n.value, "*")
		n.keyPart = "/" + escaped(n.key) + "="

		// The reference rejects a key and value twice at one level.
		if prev := lvl.add(n); prev != nil {
			d.errorf(item, ipath, "duplicate descriptor key %q value %q at this level (first at line %d)", n.key, n.value, prev.line)
			continue
		}

		var shadow, quota, detailed bool
		read(io, "shadow_mode", &shadow, d.boolean)
		read(io, "quota_mode", &quota, d.boolean)
		read(io, "detailed_metric", &detailed, d.boolean)
		read(io, "value_to_metric", &n.valueToMetric, d.boolean)
		read(io, "share_threshold", &n.shareThreshold, d.boolean)
		if n.shareThreshold && !wildcard {
			fv, _ := io.get("share_threshold")
			if n.value == "" && strings.HasSuffix(n.key, "*") {
				// The reference's key wildcard, which sluice does not reproduce.
				d.warnf(fv, io.field("share_threshold"), "ignored: a key ending in '*' is a literal key here, not the reference's key wildcard")
				n.shareThreshold = false
			} else {
				d.errorf(fv, io.field("share_threshold"), "applies only to wildcard values (ending in '*'), not %q", n.value)
			}
		}
		if n.value != "" && (!wildcard || n.shareThreshold) {
			n.valuePart = n.keyPart + escaped(n.value)
		}

		here := append(slices.Clip(parent), Entry{n.key, n.value})
		rv, one := io.get("rate_limit")
		if one {
			if r := d.rateLimit(dom, rv, io.field("rate_limit"), here); r != nil {
				n.rules = []*Rule{r}
			}
		}
		if lv, ok := io.get("rate_limits"); ok {
			if one {
				d.errorf(lv, io.field("rate_limits"), "a descriptor has rate_limit or rate_limits, not both")
			} else {
				n.rules = d.rateLimits(dom, lv, io.field("rate_limits"), here)
			}
		}
		for _, r := range n.rules {
			r.Shadow, r.QuotaMode, r.DetailedMetric = shadow, quota, detailed
		}
		n.children = d.descriptors(dom, io, "descriptors", here)
	}
	slices.SortStableFunc(lvl.wildcards, func(a, b *node) int { return len(b.prefix) - len(a.prefix) })
	return lvl
}

// rateLimits decodes a descriptor's rate_limits (a sluice extension): rate_limit bodies
// that all apply, no two with the same name or limit.
func (d *decoder) rateLimits(dom *Domain, n *yaml.Node, path string, at []Entry) []*Rule {
	items := d.seq(n, path)
	if len(items) == 0 {
		d.errorf(n, path, "must list at least one rate_limit")
		return nil
	}
	var rules []*Rule
	seen := map[string]int{}
	for i, item := range items {
		ipath := index(path, i)
		r := d.rateLimit(dom, item, ipath, at)
		if r == nil {
			continue
		}
		if r.Name != "" {
			if j, dup := seen[r.Name]; dup {
				d.errorf(item, join(ipath, "name"), "repeats the name of %s", index(path, j))
				continue
			}
			seen[r.Name] = i
			r.suffix = "#" + r.Name
		} else {
			r.suffix = "#" + strconv.Itoa(i)
		}
		for _, o := range rules {
			if !r.Unlimited && !o.Unlimited && r.Limit == o.Limit && r.RequestsPerUnit == o.RequestsPerUnit {
				d.errorf(item, ipath, "repeats the limit of another entry (%s): it would count the same units twice", o.FullKey)
			}
		}
		r.FullKey += r.suffix
		rules = append(rules, r)
	}
	return rules
}

func (d *decoder) rateLimit(dom *Domain, n *yaml.Node, path string, at []Entry) *Rule {
	o := d.object(n, path, rateLimitFields...)
	if o == nil {
		return nil
	}
	before := len(d.errs)
	r := &Rule{Domain: dom.Name, Path: at, FullKey: fullKey(dom.Name, at), Pos: d.pos(n)}
	read(o, "unlimited", &r.Unlimited, d.boolean)
	read(o, "name", &r.Name, d.str)
	rv, _ := o.get("replaces")
	for i, item := range d.seq(rv, o.field("replaces")) {
		ipath := index(o.field("replaces"), i)
		ro := d.object(item, ipath, "name")
		if ro == nil {
			continue
		}
		nv, _ := ro.get("name")
		name, _ := d.str(nv, ro.field("name"))
		switch {
		case name == "":
			d.errorf(item, ro.field("name"), "must not be empty")
		case name == r.Name:
			d.errorf(nv, ro.field("name"), "a rate limit cannot replace itself (%q)", name)
		default:
			r.Replaces = append(r.Replaces, name)
			r.replacesAt = append(r.replacesAt, written{nv, ro.field("name")})
		}
	}

	unitNode, hasUnit := o.get("unit")
	rpuNode, hasRPU := o.get("requests_per_unit")
	if r.Unlimited {
		// The reference rejects a valid unit beside unlimited, ignores any other.
		if s, ok := d.str(unitNode, o.field("unit")); hasUnit && ok {
			if _, err := ParseUnit(s); err == nil {
				d.errorf(unitNode, o.field("unit"), "must not be set when unlimited is true")
			} else {
				d.warnf(unitNode, o.field("unit"), "%q is not a unit, and unlimited ignores it (remove it)", s)
			}
		}
		for _, f := range []string{"algorithm", "burst", "calendar", "zone", "anchor_day"} {
			if v, ok := o.get(f); ok {
				d.errorf(v, o.field(f), "must not be set when unlimited is true")
			}
		}
		// Ignored when unlimited, but still a uint32, as in the reference.
		if hasRPU {
			d.integer(rpuNode, o.field("requests_per_unit"), 0, math.MaxUint32)
		}
	} else {
		if !hasUnit {
			d.errorf(n, o.field("unit"), "is required (second, minute, hour, day, week, month or year)")
		} else if s, ok := d.str(unitNode, o.field("unit")); ok {
			u, err := ParseUnit(s)
			if err != nil {
				d.errorf(unitNode, o.field("unit"), "%v", err)
			}
			r.Unit = u
		}
		if !hasRPU {
			// Read as 0, as the reference does, but rarely meant: warn.
			d.warnf(n, o.field("requests_per_unit"), "missing: read as 0, which denies every request (write 0 to say so)")
		} else if v, ok := d.integer(rpuNode, o.field("requests_per_unit"), 0, math.MaxUint32); ok {
			r.RequestsPerUnit = uint32(v)
		}
		// The sluice extensions (algorithm, burst, calendar, zone, anchor_day) are a
		// LimitSpec's, with unit and requests_per_unit as its period and rate.
		spec := LimitSpec{Rate: int64(r.RequestsPerUnit), Period: r.Unit.Period().String()}
		skip := d.readSpec(o, &spec)
		skip["rate"], skip["period"] = r.RequestsPerUnit == 0, r.Unit == UnitUnknown
		if v, ok := o.get("calendar"); ok {
			if on, _ := d.boolean(v, o.field("calendar")); on {
				if cu, ok := calendarUnits[r.Unit]; ok {
					spec.Period = cu.String()
				} else if r.Unit != UnitUnknown {
					d.errorf(v, o.field("calendar"), "applies to the units day, week, month and year, not %s", r.Unit)
				}
			}
		}
		l, err := spec.limit(sluice.FixedWindow, "calendar: true with unit day, week, month or year")
		d.specErrors(o, err, skip, map[string]string{"rate": "requests_per_unit", "period": "unit"})
		if r.Calendar = l.Calendar; r.RequestsPerUnit > 0 {
			r.Limit = l
		}
	}
	if len(d.errs) != before {
		return nil
	}
	dom.Rules = append(dom.Rules, r)
	return r
}
