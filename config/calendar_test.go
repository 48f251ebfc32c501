package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestCalendarPolicies(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "policies.yaml", `policies:
  - name: monthly
    rate: 1000
    period: calendar_month
    zone: Europe/Berlin
    anchor_day: 15
    key: {type: api_key, header: X-Api-Key}
    tiers:
      pro: {rate: 50000, period: calendar_month, zone: America/New_York, anchor_day: 31}
      daily: {rate: 10, period: calendar_day}
  - name: plain
    rate: 5
    period: 720h
`)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Policy("monthly")
	want := sluice.PerCalendar(1000, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: mustZone("Europe/Berlin"), Anchor: 15})
	if p.Limit != want {
		t.Errorf("policy limit %v, want %v", p.Limit, want)
	}
	if got := p.Tiers[0].Limit; got != sluice.PerCalendar(50000, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: mustZone("America/New_York"), Anchor: 31}) {
		t.Errorf("pro tier %v", got)
	}
	if got := p.Tiers[1].Limit; got != sluice.PerCalendar(10, sluice.Calendar{Unit: sluice.CalendarDay}) {
		t.Errorf("daily tier %v", got)
	}
	if p, _ := c.Policy("plain"); !p.Limit.Calendar.IsZero() || p.Limit.Period != 720*time.Hour {
		t.Errorf("plain %v", p.Limit)
	}
}

func TestCalendarEnvoy(t *testing.T) {
	d := loadDomain(t, `
domain: billing
descriptors:
  - key: month30
    rate_limit: {unit: month, requests_per_unit: 30}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 1000, calendar: true, zone: Europe/Berlin, anchor_day: 15}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 7, calendar: true}
`)
	ms, err := d.Match([]Descriptor{e("month30", "1"), e("month", "1"), e("week", "1")})
	if err != nil {
		t.Fatal(err)
	}
	wants := []sluice.Limit{
		{Algorithm: sluice.FixedWindow, Rate: 30, Period: 30 * 24 * time.Hour}, // the reference's month
		sluice.PerCalendar(1000, sluice.Calendar{Unit: sluice.CalendarMonth, Zone: mustZone("Europe/Berlin"), Anchor: 15}),
		sluice.PerCalendar(7, sluice.Calendar{Unit: sluice.CalendarWeek}),
	}
	for i, w := range wants {
		if ms[i].Status != Limited || ms[i].Limit != w {
			t.Errorf("%d: %v %v, want %v", i, ms[i].Status, ms[i].Limit, w)
		}
	}
}

func TestCalendarErrors(t *testing.T) {
	tests := []struct {
		name, file, content, want string
	}{
		{"zone without calendar", "p.yaml", "policies:\n  - {name: a, rate: 1, period: 1h, zone: Europe/Berlin}\n",
			"policies[0].zone: applies only to calendar periods"},
		{"unknown zone", "p.yaml", "policies:\n  - {name: a, rate: 1, period: calendar_day, zone: Mars/Olympus}\n",
			`policies[0].zone: unknown time zone "Mars/Olympus"`},
		{"anchor too large", "p.yaml", "policies:\n  - {name: a, rate: 1, period: calendar_month, anchor_day: 32}\n",
			"policies[0].anchor_day: anchor day 32 of calendar_month is outside 1..31"},
		{"anchor on a day", "p.yaml", "policies:\n  - {name: a, rate: 1, period: calendar_day, anchor_day: 3}\n",
			"policies[0].anchor_day: calendar_day takes no anchor day"},
		{"not a fixed window", "p.yaml", "policies:\n  - {name: a, algorithm: gcra, rate: 1, period: calendar_month}\n",
			"policies[0].algorithm: a calendar_month period is counted by fixed_window, not gcra"},
		{"envoy calendar second", "d.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, calendar: true}\n",
			"descriptors[0].rate_limit.calendar: applies to the units day, week, month and year, not second"},
		{"envoy zone without calendar", "d.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 1, zone: UTC}\n",
			"descriptors[0].rate_limit.zone: applies only to calendar periods (calendar: true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := loadErrors(t, map[string]string{tt.file: tt.content})
			if !strings.Contains(strings.Join(errs, "\n"), tt.want) {
				t.Errorf("errors %q, want one containing %q", errs, tt.want)
			}
		})
	}
}

// TestRateLimitsList: a descriptor with several limits (rate_limits) matches all of them,
// adjacent and in file order, each under its own name; replaces can name any of them; a
// file without the extension matches one rule per descriptor as before.
func TestRateLimitsList(t *testing.T) {
	d := loadDomain(t, `
domain: billing
descriptors:
  - key: customer
    rate_limits:
      - {name: burst, unit: second, requests_per_unit: 2}
      - {name: monthly, unit: month, requests_per_unit: 1000, calendar: true, zone: Europe/Berlin}
      - {unit: day, requests_per_unit: 100}
  - key: plan
    value: unmetered
    rate_limit: {unit: second, requests_per_unit: 50, replaces: [{name: monthly}]}
  - key: other
    rate_limit: {unit: second, requests_per_unit: 1}
`)
	ms, err := d.Match([]Descriptor{e("other", "x"), e("customer", "c1")})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		desc    int
		status  Status
		fullKey string
		name    string
		rate    int64
	}
	var gs []got
	for _, m := range ms {
		gs = append(gs, got{m.Descriptor, m.Status, m.Rule.FullKey, m.Rule.Name, m.Limit.Rate})
	}
	want := []got{
		{0, Limited, "billing.other", "", 1},
		{1, Limited, "billing.customer#burst", "burst", 2},
		{1, Limited, "billing.customer#monthly", "monthly", 1000},
		{1, Limited, "billing.customer#2", "", 100},
	}
	if len(gs) != len(want) {
		t.Fatalf("matches %+v, want %+v", gs, want)
	}
	for i := range want {
		if gs[i] != want[i] {
			t.Errorf("match %d: %+v, want %+v", i, gs[i], want[i])
		}
	}
	if ms[1].Key != ms[2].Key || ms[2].Limit.Calendar.Unit != sluice.CalendarMonth {
		t.Errorf("the limits of one descriptor count one key: %q %q, %v", ms[1].Key, ms[2].Key, ms[2].Limit)
	}
	ms, _ = d.Match([]Descriptor{e("customer", "c1"), e("plan", "unmetered")})
	if ms[0].Status != Limited || ms[1].Status != Replaced || ms[2].Status != Limited || ms[3].Status != Limited {
		t.Errorf("replaces monthly: %v %v %v %v", ms[0].Status, ms[1].Status, ms[2].Status, ms[3].Status)
	}
	if rs := d.LookupAll([]Entry{{"customer", "c9"}}); len(rs) != 3 || d.Lookup([]Entry{{"customer", "c9"}}) != rs[0] {
		t.Errorf("LookupAll %v", rs)
	}
}

func TestRateLimitsErrors(t *testing.T) {
	tests := []struct{ name, content, want string }{
		{"both", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: [{unit: day, requests_per_unit: 5}]\n",
			"descriptors[0].rate_limits: a descriptor has rate_limit or rate_limits, not both"},
		{"same name", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {name: a, unit: second, requests_per_unit: 1}\n      - {name: a, unit: day, requests_per_unit: 5}\n",
			"descriptors[0].rate_limits[1].name: repeats the name of descriptors[0].rate_limits[0]"},
		{"same limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: second, requests_per_unit: 1}\n",
			"descriptors[0].rate_limits[1]: repeats the limit of another entry"},
		{"empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n",
			"descriptors[0].rate_limits: must list at least one rate_limit"},
		{"bad entry", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: fortnight, requests_per_unit: 1}\n",
			"descriptors[0].rate_limits[0].unit: unknown unit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := loadErrors(t, map[string]string{"d.yaml": tt.content})
			if !strings.Contains(strings.Join(errs, "\n"), tt.want) {
				t.Errorf("errors %q, want one containing %q", errs, tt.want)
			}
		})
	}
}

// mustZone is sluice.ParseZone of a name known to be valid.
func mustZone(name string) sluice.Zone {
	z, err := sluice.ParseZone(name)
	if err != nil {
		panic(err)
	}
	return z
}
