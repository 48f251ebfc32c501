package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// algoFiles[a] is the file that transcribes algorithm a.
var algoFiles = [...]string{
	sluice.GCRA:          "gcra.lua",
	sluice.TokenBucket:   "token_bucket.lua",
	sluice.LeakyBucket:   "leaky_bucket.lua",
	sluice.FixedWindow:   "fixed_window.lua",
	sluice.SlidingWindow: "sliding_window.lua",
	sluice.SlidingLog:    "sliding_log.lua",
}

// luaOrder is the order the files are concatenated in: helpers, then one file per
// algorithm (each mirrors a function of internal/algo), then the entry point.
var luaOrder = append(append([]string{"prelude.lua"}, algoFiles[:]...), "decide.lua")

// script is the decision script and its SHA1, as Redis names it in EVALSHA.
type script struct {
	body string
	sha  string
}

// decideScript decides any mix of algorithms. A call whose requests all use one algorithm
// goes through that algorithm's own script (decideScripts), which defines only it: Redis
// runs a script's whole body on every call, and the five unused algorithms' definitions
// (closures, and the garbage they leave for Lua's collector) were 11% of the instructions
// of a lone GCRA decision (98.5k → 87.6k per decision, bench/cmd/rediscost -batch 1; in
// calls of 26, 29.0k → 28.3k).
var decideScript = newScript(luaOrder...)

// decideScripts[a] decides only algorithm a.
var decideScripts = func() (out [len(algoFiles)]script) {
	for a, f := range algoFiles {
		out[a] = newScript("prelude.lua", f, "decide.lua")
	}
	return out
}()

// scriptFor returns the script for a call carrying the items of calls: the one algorithm's
// own when they all use it, else the general one.
func scriptFor(calls []*call) script {
	var first sluice.Algorithm
	seen := false
	for _, c := range calls {
		for _, it := range c.items {
			switch a := it.info.limit.Algorithm; {
			case !seen:
				first, seen = a, true
			case a != first:
				return decideScript
			}
		}
	}
	if !seen || int(first) >= len(decideScripts) {
		return decideScript
	}
	return decideScripts[first]
}

// newScript concatenates the embedded files into one script.
func newScript(files ...string) script {
	var b strings.Builder
	for _, name := range files {
		src, err := luaFiles.ReadFile("lua/" + name)
		if err != nil {
			panic("redisstore: missing embedded " + name) // a build error, not input
		}
		b.Write(src)
		b.WriteByte('\n')
	}
	body := b.String()
	sum := sha1.Sum([]byte(body))
	return script{body: body, sha: hex.EncodeToString(sum[:])}
}

// eval runs sc with EVALSHA. A NOSCRIPT reply (after a restart, a failover or SCRIPT
// FLUSH) means the script did not run; it is sent again with EVAL, which also loads it
// into the server's script cache, so the caller never sees it.
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
	if s.clock != nil {
		return strconv.FormatInt(algo.Micros(s.clock()), 10)
	}
	return "-"
}

// loadScripts loads the decision script on every node (every primary of a cluster), so
// that the first decisions find it cached. Failures are returned but harmless: EVALSHA
// heals a missing script.
func (s *Store) loadScripts(ctx context.Context, client rueidis.Client) error {
	var first error
	for addr, node := range client.Nodes() {
		for _, sc := range append([]script{decideScript}, decideScripts[:]...) {
			sha, err := node.Do(ctx, node.B().ScriptLoad().Script(sc.body).Build()).ToString()
			if err == nil && sha != sc.sha {
				err = errorf("SCRIPT LOAD on %s returned %s, want %s", addr, sha, sc.sha)
			}
			if err != nil && first == nil {
				first = wrap("SCRIPT LOAD on "+addr, err)
			}
		}
	}
	return first
}
