package main

import (
	"net"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// TestUsageErrorsAreOneLine: a command line that cannot be parsed exits 2 with one line
// on stderr that names the mistake and, when one is near, the command or flag meant;
// never the help, and never check's "denied" status.
func TestUsageErrorsAreOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serv"}, "sluice: unknown command serv; did you mean serve?"},
		{[]string{"help", "serv"}, "sluice: unknown command serv; did you mean serve?"},
		{[]string{"chek", "--policy", "demo", "--key", "1.2.3.4"}, "sluice: unknown command chek; did you mean check?"},
		{[]string{"xyzzy"}, "sluice: unknown command xyzzy; the commands are serve, proxy, check, key, override, simulate, version, help"},
		{[]string{"override", "frob"}, "sluice override: unknown command frob; the commands are set, get, list, rm, help"},
		{[]string{"override", "st", "users", "x"}, "sluice override: unknown command st; did you mean set?"},
		{[]string{"serve", "--confg", "x"}, "sluice serve: unknown flag --confg; did you mean --config?"},
		{[]string{"check", "--polcy", "demo"}, "sluice check: unknown flag --polcy; did you mean --policy?"},
		{[]string{"check", "--zzzzzz"}, "sluice check: unknown flag --zzzzzz; see sluice check --help"},
		{[]string{"check", "--cost", "abc", "--policy", "demo", "--key", "k"}, `sluice check: --cost: "abc" is not valid`},
		{[]string{"check", "--policy"}, "sluice check: --policy needs a value"},
		{[]string{"check", "extra", "--policy", "demo", "--key", "k"}, `sluice check: takes no arguments, got "extra"`},
		{[]string{"check", "--server", "localhost:8080", "--policy", "demo", "--key", "k"}, "sluice check: --server localhost:8080 has no scheme; did you mean http://localhost:8080?"},
		{[]string{"check", "--server", "redis://localhost:8080", "--policy", "demo", "--key", "k"}, "did you mean http://localhost:8080?"},
		{[]string{"serve", "--redis", "localhost:6379"}, "did you mean redis://localhost:6379?"},
		{[]string{"override", "set", "users", "x"}, "sluice override set: missing --rate"},
		{[]string{"override", "get", "users"}, "sluice override get: want POLICY IDENTITY, got 1 arguments"},
		{[]string{"simulate", "--algorithms", "gcra,foo"}, `sluice simulate: --algorithms: unknown algorithm "foo": a simulation runs gcra, token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_log`},
		{[]string{"simulate", "--algorithms", "concurrency"}, `unknown algorithm "concurrency"`},
		{[]string{"simulate", "--scale", "0"}, "sluice simulate: --scale must be in (0, 1000], got 0"},
		{[]string{"simulate", "--seed", "minus-one"}, `sluice simulate: --seed: "minus-one" is not valid`},
		{[]string{"simulate", "--redis", "localhost:6379"}, "did you mean redis://localhost:6379?"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runCmd(t, tc.args...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d (usage)", code, exitUsage)
			}
			if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q, want one line holding %q", errOut, tc.want)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
		})
	}
}

// TestListenErrorNamesTheFlag: an address in use names the flag that chose it.
func TestListenErrorNamesTheFlag(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--http", addr, "--grpc", "127.0.0.1:0"}, "--http " + addr + ": listen tcp"},
		{[]string{"serve", "--http", "127.0.0.1:0", "--grpc", addr}, "--grpc " + addr + ": listen tcp"},
		{[]string{"proxy", "--upstream", "http://127.0.0.1:1", "--listen", addr}, "--listen " + addr + ": listen tcp"},
	} {
		code, _, errOut := runCmd(t, tc.args...)
		if code != exitError || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "address already in use") {
			t.Errorf("%v: exit %d, stderr %q; want 1 and %q ... address already in use", tc.args, code, errOut, tc.want)
		}
	}
}

// TestEveryFlagHasAnEnvironmentVariable: what the README promises.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	var walk func(c *cli.Command)
	walk = func(c *cli.Command) {
		for _, f := range c.Flags {
			if len(f.Names()) > 0 && (f.Names()[0] == "help" || f.Names()[0] == "version") {
				continue
			}
			var env string
			if d, ok := f.(cli.DocGenerationFlag); ok {
				env = strings.Join(d.GetEnvVars(), ",")
			}
			if env == "" {
				t.Errorf("%s --%s has no environment variable", c.FullName(), f.Names()[0])
			}
		}
		for _, sub := range c.Commands {
			walk(sub)
		}
	}
	app := newApp(nil, nil)
	var nf error
	unixConventions(app, &nf)
	walk(app)
}

// TestCheckExitCodes: check's documented exit statuses, against serve on the built-in
// configuration: allowed 0, an error 1 (a policy or domain it does not have, named with
// those it has), usage 2, denied 3, nothing matched 4.
func TestCheckExitCodes(t *testing.T) {
	base, _, _ := started(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--policy", "demo", "--key", "192.0.2.1"}, exitOK, `"allowed": true`},
		{[]string{"--policy", "demo", "--key", "192.0.2.2", "--cost", "20"}, exitOK, `"remaining": 0`},
		{[]string{"--policy", "demo", "--key", "192.0.2.2"}, exitDenied, `"allowed": false`},
		{[]string{"--domain", "demo", "--descriptor", "message_type=sms"}, exitNoMatch, `"status": "no_match"`},
		{[]string{"--domain", "demo", "--descriptor", "path=/healthz"}, exitOK, `"status": "unlimited"`},
		{[]string{"--domain", "edge", "--descriptor", "path=/login"}, exitError, `no domain named "edge" (the configuration's domains: demo)`},
		{[]string{"--policy", "nope", "--key", "k"}, exitError, `no policy named "nope" (the configuration's policies: demo, api, users)`},
		{[]string{"--key", "k"}, exitUsage, "name a --policy"},
	} {
		code, out, errOut := runCmd(t, append([]string{"check", "--server", base}, tc.args...)...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("check %v: exit %d, output %s%s; want %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
}
