package redisstore

import (
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/store"
)

// TestLuaMulDiv checks the Lua long division against algo.MulDiv and algo.MulDivCeil on
// products far beyond 2^53, where a plain a*b/c in doubles would be wrong.
func TestLuaMulDiv(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	prelude, err := luaFiles.ReadFile("lua/prelude.lua")
	if err != nil {
		t.Fatal(err)
	}
	harness := string(prelude) + `
local out = {}
for i = 1, #ARGV, 3 do
  local a, b, c = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  out[#out + 1] = muldiv(a, b, c)
  out[#out + 1] = muldivceil(a, b, c)
end
return out
`
	type triple struct{ a, b, c int64 }
	cases := []triple{
		{0, 0, 1}, {1, 1, 1}, {0, 1 << 50, 3}, {1 << 40, 1 << 50, 1 << 50}, {(1 << 40) - 1, (1 << 50) - 1, 1 << 50},
		{1 << 40, (1 << 50) - 1, 1 << 38}, {12345, 1 << 50, 1<<40 + 1}, {(1 << 40), (1 << 50) - 7, (1 << 40) - 1},
		{999_999, 86_400_000_000, 86_400_000_000}, {1 << 20, 3_600_000_000, 7},
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for len(cases) < 3000 {
		// a ≤ 2^40 (a count), b < 2^50 (a period), c ≤ 2^50, result below 2^53.
		a := rng.Int64N(1<<40) + 1
		b := rng.Int64N(1 << 50)
		c := rng.Int64N(1<<50) + 1
		if q := new(big.Int).Mul(big.NewInt(a), big.NewInt(b)); q.Div(q, big.NewInt(c)).Cmp(big.NewInt(1<<53-1)) >= 0 {
			continue
		}
		cases = append(cases, triple{a, b, c})
	}
	for start := 0; start < len(cases); start += 500 {
		chunk := cases[start:min(start+500, len(cases))]
		args := []string{"EVAL", harness, "0"}
		for _, c := range chunk {
			args = append(args, strconv.FormatInt(c.a, 10), strconv.FormatInt(c.b, 10), strconv.FormatInt(c.c, 10))
		}
		reply, err := srv.Do(args...)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(reply, "\n")
		if len(got) != 2*len(chunk) {
			t.Fatalf("%d results for %d cases", len(got), len(chunk))
		}
		for i, c := range chunk {
			want := []int64{algo.MulDiv(c.a, c.b, c.c), algo.MulDivCeil(c.a, c.b, c.c)}
			for j, w := range want {
				if got[2*i+j] != strconv.FormatInt(w, 10) {
					t.Errorf("muldiv%s(%d, %d, %d) = %s in Lua, %d in Go", []string{"", "ceil"}[j], c.a, c.b, c.c, got[2*i+j], w)
				}
			}
		}
	}
}

// TestLuaFilesNameTheirGoFunction: every transcription names the function it mirrors.
func TestLuaFilesNameTheirGoFunction(t *testing.T) {
	want := map[string]string{
		"prelude.lua":         "Mirrors algo.MulDiv",
		"gcra.lua":            "Mirrors algo.GCRA",
		"fixed_window.lua":    "Mirrors algo.FixedWindow",
		"sliding_window.lua":  "Mirrors algo.SlidingWindow",
		"sliding_log.lua":     "Mirrors algo.SlidingLog",
		"calendar_window.lua": "Mirrors algo.CalendarWindow",
		"decide.lua":          "memory.Store",
		"reserve_gcra.lua":    "Mirrors algo.ReserveGCRA",
		"reserve_cancel.lua":  "Mirrors algo.CancelReservation",
		"reserve_entry.lua":   "Store.Reserve",
		"refund_bucket.lua":   "Mirrors algo.RefundGCRA",
		"refund_window.lua":   "Mirrors algo.RefundFixedWindow, algo.RefundSlidingWindow and algo.RefundCalendarWindow",
		"refund_log.lua":      "Mirrors algo.RefundSlidingLog",
		"concurrency.lua":     "Mirrors algo.Concurrency",
		"release.lua":         "Mirrors algo.Release",
		"charge.lua":          "Mirrors algo.ChargeGCRA",
		"settle.lua":          "Mirrors algo.Settle",
		"refund.lua":          "Store.allowAcrossSlots",
	}
	files, err := luaFiles.ReadDir("lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := want[f.Name()]; !ok {
			t.Errorf("lua/%s: no expected header for it in this test", f.Name())
		}
	}
	for name := range want {
		src, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			t.Fatal(err)
		}
		head, _, _ := strings.Cut(string(src), "\n\n")
		if !strings.Contains(head, want[name]) {
			t.Errorf("%s: header does not mention %q:\n%s", name, want[name], head)
		}
	}
}

// TestScriptFor: a call of one algorithm goes through that algorithm's own script, any mix
// through the general one, which defines all six.
func TestScriptFor(t *testing.T) {
	s := &Store{}
	calls := func(algs ...sluice.Algorithm) []*call {
		var out []*call
		for _, a := range algs {
			out = append(out, &call{items: []item{{id: "k", info: s.info(sluice.Limit{Algorithm: a, Rate: 1, Period: time.Second})}}})
		}
		return out
	}
	for _, a := range store.Algorithms() {
		code := limitCode(sluice.Limit{Algorithm: a}) // GCRA's for TokenBucket and LeakyBucket
		if got := scriptFor(calls(a, a, a)); got.sha != decideScripts[code].sha {
			t.Errorf("%v only: got script %s, want %s", a, got.sha, decideScripts[code].sha)
		}
		if name := strings.TrimSuffix(algoFiles[code], ".lua"); !strings.Contains(decideScripts[code].body, "\nlocal one, run = "+name+", nil\n") {
			t.Errorf("%v's script does not name %s as its one algorithm", a, name)
		}
	}
	if got := scriptFor(calls(sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket)); got.sha != decideScripts[sluice.GCRA].sha {
		t.Errorf("the three bucket names: got script %s, want GCRA's own", got.sha)
	}
	if got := scriptFor(calls(sluice.GCRA, sluice.FixedWindow)); got.sha != decideScript.sha {
		t.Errorf("mixed call: got script %s, want the general one", got.sha)
	}
	for _, a := range allAlgos {
		if f := algoFiles[a]; !strings.Contains(decideScript.body, "["+strconv.Itoa(a)+"] = "+strings.TrimSuffix(f, ".lua")) {
			t.Errorf("the general script does not register algorithm %d", a)
		}
	}
}

// TestWithoutUnused: a script keeps the top-level functions something outside their own
// definition uses (directly or through another kept one), and loses the others with the
// comment lines right above them.
func TestWithoutUnused(t *testing.T) {
	src := `-- header
local x = 1

-- helper used by used_helper only
local function inner(a)
  return a + x
end

-- used by the entry point
local function used_helper(a)
  return inner(a) * 2
end

-- recursive, but nothing else calls it
local function lonely(n)
  if n == 0 then return 0 end
  return lonely(n - 1)
end

-- only an unused function calls it
local function orphan_dep(a)
  return a
end

local function unused(a)
  -- mentions used_helper and inner in a comment only
  return orphan_dep(a)
end

-- the entry point mentions unused only in a comment
return used_helper(x)
`
	got := withoutUnused(src)
	for _, keep := range []string{"local function inner(", "local function used_helper(", "-- helper used by used_helper only", "-- header", "return used_helper(x)"} {
		if !strings.Contains(got, keep) {
			t.Errorf("lost %q:\n%s", keep, got)
		}
	}
	for _, drop := range []string{"lonely", "orphan_dep", "local function unused", "-- only an unused function calls it"} {
		if strings.Contains(got, drop) {
			t.Errorf("kept %q:\n%s", drop, got)
		}
	}
	if strings.Contains(got, "\n\n\n") {
		t.Errorf("left a run of blank lines:\n%s", got)
	}

	// withoutUnused reads "--" as a comment wherever it is: no string in the scripts
	// may hold one, or a name after it would be missed and its function dropped.
	files, _ := luaFiles.ReadDir("lua")
	for _, f := range files {
		src, _ := luaFiles.ReadFile("lua/" + f.Name())
		for n, line := range strings.Split(string(src), "\n") {
			if i := strings.Index(line, "--"); i >= 0 && (strings.Count(line[:i], "'")%2 == 1 || strings.Count(line[:i], `"`)%2 == 1) {
				t.Errorf("%s:%d: a string holds \"--\", which withoutUnused would take for a comment", f.Name(), n+1)
			}
		}
	}

	// The one-algorithm scripts lose the helpers their algorithm does not use; the
	// differential tests (diff_test.go) run every script against the Go algorithms.
	if strings.Contains(decideScripts[sluice.GCRA].body, "local function muldivrem(") {
		t.Error("the GCRA script still defines muldivrem, which only the window algorithms use")
	}
	if !strings.Contains(decideScripts[sluice.SlidingWindow].body, "local function muldivrem(") {
		t.Error("the SlidingWindow script lost muldivrem, which it uses")
	}
}

// TestDecideArgs: decide.lua's arguments after the requests are left out from the end
// while they hold their defaults, and never one that precedes an argument sent.
func TestDecideArgs(t *testing.T) {
	reqs, groups, cal := []byte("R"), []byte("G"), []byte("C")
	for _, tc := range []struct {
		groups, cal      []byte
		repeats, withNow bool
		want             []string
	}{
		{want: []string{"now", "ttl", "R"}},
		{groups: groups, want: []string{"now", "ttl", "R", "G"}},
		{repeats: true, want: []string{"now", "ttl", "R", "", "1"}},
		{groups: groups, repeats: true, want: []string{"now", "ttl", "R", "G", "1"}},
		{withNow: true, want: []string{"now", "ttl", "R", "", "0", "1"}},
		{withNow: true, cal: cal, want: []string{"now", "ttl", "R", "", "0", "1", "C"}},
		{cal: cal, want: []string{"now", "ttl", "R", "", "0", "0", "C"}},
		{groups: groups, repeats: true, withNow: true, cal: cal, want: []string{"now", "ttl", "R", "G", "1", "1", "C"}},
	} {
		prev := []string{"kept"}
		got := decideArgs(prev, "now", "ttl", reqs, tc.groups, tc.repeats, tc.withNow, tc.cal)
		if !slices.Equal(got, append([]string{"kept"}, tc.want...)) {
			t.Errorf("groups %q, repeats %v, withNow %v, cal %q: %q, want %q", tc.groups, tc.repeats, tc.withNow, tc.cal, got[1:], tc.want)
		}
	}
}
