package redisstore

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// luaOrder is the order the files are concatenated in: helpers, then one file per
// algorithm (each mirrors a function of internal/algo), then the entry point.
var luaOrder = []string{
	"prelude.lua",
	"gcra.lua",
	"token_bucket.lua",
	"leaky_bucket.lua",
	"fixed_window.lua",
	"sliding_window.lua",
	"sliding_log.lua",
	"decide.lua",
}

// script is the decision script and its SHA1, as Redis names it in EVALSHA.
type script struct {
	body string
	sha  string
}

var decideScript = newScript(luaOrder...)

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
		return strconv.FormatInt(s.clock().UnixMicro(), 10)
	}
	return "-"
}

// loadScripts loads the decision script on every node (every primary of a cluster), so
// that the first decisions find it cached. Failures are returned but harmless: EVALSHA
// heals a missing script.
func (s *Store) loadScripts(ctx context.Context, client rueidis.Client) error {
	var first error
	for addr, node := range client.Nodes() {
		sha, err := node.Do(ctx, node.B().ScriptLoad().Script(decideScript.body).Build()).ToString()
		if err == nil && sha != decideScript.sha {
			err = errorf("SCRIPT LOAD on %s returned %s, want %s", addr, sha, decideScript.sha)
		}
		if err != nil && first == nil {
			first = wrap("SCRIPT LOAD on "+addr, err)
		}
	}
	return first
}
