package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// calendarCode is the scripts' number for a calendar limit (calendar_window.lua).
const calendarCode = 7

// limitCode is the scripts' number for l: calendarCode, GCRA's for the three bucket
// algorithms (one machine, algo.GCRA), else its Algorithm.
func limitCode(l sluice.Limit) int {
	switch {
	case !l.Calendar.IsZero():
		return calendarCode
	case l.Algorithm == sluice.TokenBucket, l.Algorithm == sluice.LeakyBucket:
		return int(sluice.GCRA)
	}
	return int(l.Algorithm)
}

// algoFiles[a] is the file that transcribes algorithm number a ("" for TokenBucket's and
// LeakyBucket's).
var algoFiles = [...]string{
	sluice.GCRA:          "gcra.lua",
	sluice.FixedWindow:   "fixed_window.lua",
	sluice.SlidingWindow: "sliding_window.lua",
	sluice.SlidingLog:    "sliding_log.lua",
	sluice.Concurrency:   "concurrency.lua",
	calendarCode:         "calendar_window.lua",
}

// script is a script and its SHA1, as Redis names it in EVALSHA.
type script struct {
	body string
	sha  string
}

// decideScript decides any mix of algorithms. A call whose requests all use one algorithm
// goes through that algorithm's own script (decideScripts), which defines only it: Redis
// runs a script's whole body, definitions included, on every call.
var decideScript = algoScript(allAlgos, "decide.lua")

// decideScripts[a] decides only algorithm a (the zero script for the unused numbers).
var decideScripts = func() (out [len(algoFiles)]script) {
	for _, a := range allAlgos {
		out[a] = algoScript([]int{a}, "decide.lua")
	}
	return out
}()

// allAlgos is every algorithm number the scripts know.
var allAlgos = func() (all []int) {
	for a, f := range algoFiles {
		if f != "" {
			all = append(all, a)
		}
	}
	return all
}()

// algoScript is the script made of prelude.lua, the files of algorithms codes (each
// defines a function named as the file), a line that sets the locals one (the only
// algorithm's function, or nil) and run (by algorithm number, when there are several),
// and files.
func algoScript(codes []int, files ...string) script {
	srcs := []string{"prelude.lua"}
	var entries []string
	for _, a := range codes {
		srcs = append(srcs, algoFiles[a])
		entries = append(entries, fmt.Sprintf("[%d] = %s", a, strings.TrimSuffix(algoFiles[a], ".lua")))
	}
	line := "local one, run = nil, {" + strings.Join(entries, ", ") + "}\n"
	if len(codes) == 1 {
		line = "local one, run = " + strings.TrimSuffix(algoFiles[codes[0]], ".lua") + ", nil\n"
	}
	return makeScript(luaText(srcs...) + line + luaText(files...))
}

// releaseScript releases a lease (lua/release.lua).
var releaseScript = newScript("prelude.lua", "release.lua")

// scriptFor returns the script for a call carrying the items of calls (at least one): the
// one algorithm's own when they all use it, else the general one.
func scriptFor(calls []*call) script {
	first := calls[0].items[0].info.code
	for _, c := range calls {
		for _, it := range c.items {
			if it.info.code != first {
				return decideScript
			}
		}
	}
	if first >= len(decideScripts) || algoFiles[first] == "" {
		return decideScript
	}
	return decideScripts[first]
}

// newScript concatenates the embedded files into one script (makeScript).
func newScript(files ...string) script { return makeScript(luaText(files...)) }

// luaText is the embedded files, concatenated.
func luaText(files ...string) string {
	var b strings.Builder
	for _, name := range files {
		src, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			panic("redisstore: missing embedded " + name) // a build error, not input
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	return b.String()
}

// makeScript is the script of Lua source src, less the functions it does not use.
func makeScript(src string) script {
	body := withoutUnused(src)
	sum := sha1.Sum([]byte(body))
	return script{body: body, sha: hex.EncodeToString(sum[:])}
}

// withoutUnused removes from a script the top-level local functions (from a line starting
// "local function NAME(" to the next line "end") whose name occurs, outside comments, only
// in their own definition or in removed ones, with the comment lines right above them.
// Redis makes a closure per definition on every call; the script behaves as before.
func withoutUnused(body string) string {
	code := blankLuaComments(body) // offsets as in body
	uses := map[string]int{}
	for _, w := range luaName.FindAllString(code, -1) {
		uses[w]++
	}
	defs := luaFuncs(code)
	own := make([]int, len(defs)) // how often each definition names itself
	for k, d := range defs {
		for _, w := range luaName.FindAllString(code[d.start:d.end], -1) {
			if w == d.name {
				own[k]++
			}
		}
	}
	gone := make([]bool, len(defs))
	for changed := true; changed; {
		changed = false
		for k, d := range defs {
			if gone[k] || uses[d.name] > own[k] {
				continue
			}
			gone[k], changed = true, true
			for _, w := range luaName.FindAllString(code[d.start:d.end], -1) {
				uses[w]--
			}
		}
	}
	var b strings.Builder
	at := 0
	for k, d := range defs {
		if !gone[k] {
			continue
		}
		start := d.start
		for start > at {
			prev := strings.LastIndexByte(body[:start-1], '\n') + 1
			if prev < at || !strings.HasPrefix(body[prev:start], "--") {
				break
			}
			start = prev
		}
		b.WriteString(body[at:start])
		at = d.end
	}
	b.WriteString(body[at:])
	out := b.String()
	for strings.Contains(out, "\n\n\n") {
		out = strings.ReplaceAll(out, "\n\n\n", "\n\n")
	}
	return out
}

// luaDef is a top-level function definition: code[start:end], its last newline included.
type luaDef struct {
	name       string
	start, end int
}

var (
	luaFuncHead = regexp.MustCompile(`(?m)^local function (\w+)\(`)
	// luaName matches every name (identifier or keyword), and the letters that follow a
	// number's first digit (1e9), which no function is named as.
	luaName = regexp.MustCompile(`[A-Za-z_]\w*`)
)

// luaFuncs finds the top-level function definitions of code.
func luaFuncs(code string) []luaDef {
	var defs []luaDef
	end := 0
	for _, m := range luaFuncHead.FindAllStringSubmatchIndex(code, -1) {
		n := strings.Index(code[m[0]:], "\nend\n")
		if m[0] < end || n < 0 {
			continue
		}
		end = m[0] + n + len("\nend\n")
		defs = append(defs, luaDef{name: code[m[2]:m[3]], start: m[0], end: end})
	}
	return defs
}

// blankLuaComments returns s with its "--" comments, to the end of their line, replaced
// by spaces. The scripts hold no string containing "--".
func blankLuaComments(s string) string {
	b := []byte(s)
	for i := 0; i+1 < len(b); i++ {
		if b[i] == '-' && b[i+1] == '-' {
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		}
	}
	return string(b)
}

// eval runs sc with EVALSHA, and again with EVAL (which loads it) after a NOSCRIPT reply:
// the script did not run.
func (s *Store) eval(ctx context.Context, c rueidis.Client, sc script, keys, args []string) rueidis.RedisResult {
	res := c.Do(ctx, c.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	if err, ok := rueidis.IsRedisErr(res.Error()); ok && err.IsNoScript() {
		s.noscript.Add(1)
		res = c.Do(ctx, c.B().Eval().Script(sc.body).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	return res
}

// scriptNow is the scripts' first argument: the store's clock in µs, or "-" for Redis's.
func (s *Store) scriptNow() string {
	_, now := s.callNow()
	return now
}

// callNow is a call's instant as the store knows it (the local clock without WithClock,
// for calendar bounds) and scriptNow.
func (s *Store) callNow() (int64, string) {
	if s.clock != nil {
		us := algo.Micros(s.clock())
		return us, strconv.FormatInt(us, 10)
	}
	return algo.Micros(time.Now()), "-"
}

// decideArgs appends to args decide.lua's ARGV for a call: now (Store.callNow), the
// minimum TTL, the packed requests, the all-or-nothing groups, whether a key repeats,
// whether the reply ends with the script's now, and the calendar bounds; trailing
// arguments that hold their defaults are left out.
func decideArgs(args []string, now, minTTL string, reqs, groups []byte, repeats, withNow bool, cal []byte) []string {
	opt := [...]string{bytesString(groups), "0", "0", bytesString(cal)}
	if repeats {
		opt[1] = "1"
	}
	if withNow {
		opt[2] = "1"
	}
	n := len(opt)
	for n > 0 && (opt[n-1] == "" || opt[n-1] == "0") {
		n--
	}
	return append(append(args, now, minTTL, bytesString(reqs)), opt[:n]...)
}

// loadScripts loads the decision scripts on every node, so that the first decisions find
// them cached. Failures are harmless: eval heals a missing script.
func (s *Store) loadScripts(ctx context.Context, client rueidis.Client) error {
	var first error
	for addr, node := range client.Nodes() {
		for _, sc := range append([]script{decideScript}, decideScripts[:]...) {
			if sc.sha == "" {
				continue
			}
			sha, err := node.Do(ctx, node.B().ScriptLoad().Script(sc.body).Build()).ToString()
			if err == nil && sha != sc.sha {
				err = errorf("SCRIPT LOAD on %s returned %s, want %s", addr, sha, sc.sha)
			}
			if err != nil && first == nil {
				first = wrap(ctx, "SCRIPT LOAD on "+addr, err)
			}
		}
	}
	return first
}
