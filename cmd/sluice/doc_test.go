package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"
)

// TestDocumentedCommands runs every shell command of README.md and docs/*.md, and every
// example in a command's --help, as a reader would copy it, against the built binary,
// and checks the result the document states. The conventions, which every document
// follows:
//
//   - Commands are the lines of ```sh blocks (a trailing \ continues a line) and, in a
//     command's --help, the indented lines that start with "sluice", "curl" or "export".
//     A fenced block without a language is an error: label it (sh, text, ...).
//   - A command must exit 0, unless its trailing comment states "exit N" (and "exit N:
//     TEXT" also that TEXT appears in its output), at its start or after a description
//     and "; ". Other trailing comments describe.
//   - "untested: REASON" in the comment marks a command that cannot run here (a Kubernetes cluster,
//     a container registry); the test lists each as a skipped subtest with its reason.
//   - `sluice serve` (or `go run ./cmd/sluice serve`, with or without a trailing &) starts
//     a server on free ports and waits until it is ready. Any other command first starts
//     one when none runs: `sluice serve` on the configuration the document names in a
//     line "<!-- commands run against: sluice serve --config PATH -->" (the built-in one
//     by default), with the environment the document has exported so far. localhost:8080
//     and localhost:8081 in a command are that server's addresses, and $SLUICE_SERVER
//     points at it.
//   - `export NAME=VALUE` sets NAME for the commands after it; $API_KEY, a placeholder
//     for a reader's own key, is "doc-test-api-key".
//
// A document's commands run in order in one session, in a directory that holds the
// repository's top-level files (so relative paths resolve and files they write land in
// a temporary directory). `go run ./cmd/sluice` is the built binary, as is `sluice` on
// PATH.
func TestDocumentedCommands(t *testing.T) {
	bin := sluiceBinary(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var docs []docSession
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	for _, f := range append([]string{filepath.Join(root, "README.md")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		d, err := parseMarkdown(rel, string(b))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
	help, err := helpExamples(newApp(io.Discard, io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, help...)

	n := 0
	for _, d := range docs {
		n += len(d.cmds)
	}
	if n < 20 {
		t.Fatalf("found only %d documented commands: is the extraction broken?", n)
	}
	for _, d := range docs {
		t.Run(d.name, func(t *testing.T) {
			s := newSession(t, bin, root, d)
			for _, c := range d.cmds {
				t.Run(c.where, func(t *testing.T) {
					if c.untested != "" {
						t.Skipf("untested (%s): %s", c.untested, c.line)
					}
					t.Log(c.line)
					s.run(t, c)
				})
			}
		})
	}
}

// docCmd is one documented command and what the document states of it.
type docCmd struct {
	where    string // file:line, or the command whose --help shows it
	line     string // the command as written
	exit     int
	contains string
	untested string // why it cannot run here; "" when it runs
}

type docSession struct {
	name   string
	config string // --config for the server commands run against; "" for the built-in
	cmds   []docCmd
}

var (
	fenceRe  = regexp.MustCompile("^\\s*```+\\s*(\\S*)")
	configRe = regexp.MustCompile(`<!-- commands run against: sluice serve --config (\S+) -->`)
	exitRe   = regexp.MustCompile(`(?:^|;\s*)exit (\d+)(?::\s*(.*))?$`)
)

// parseMarkdown returns the commands of the ```sh blocks of a Markdown document.
func parseMarkdown(name, text string) (docSession, error) {
	d := docSession{name: name}
	if m := configRe.FindStringSubmatch(text); m != nil {
		d.config = m[1]
	}
	lines := strings.Split(text, "\n")
	var lang string
	in := false
	var cont strings.Builder
	for i, l := range lines {
		if m := fenceRe.FindStringSubmatch(l); m != nil {
			if !in {
				in, lang = true, m[1]
				if lang == "" {
					return d, fmt.Errorf("%s:%d: a fenced block without a language: label it (sh for commands to run, text for anything else)", name, i+1)
				}
			} else {
				in = false
			}
			continue
		}
		if !in || (lang != "sh" && lang != "shell" && lang != "bash") {
			continue
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " "), "\\"); ok {
			cont.WriteString(s)
			continue
		}
		cont.WriteString(l)
		full := cont.String()
		cont.Reset()
		c, ok, err := parseCommand(fmt.Sprintf("%s:%d", name, i+1), full)
		if err != nil {
			return d, err
		}
		if ok {
			d.cmds = append(d.cmds, c)
		}
	}
	return d, nil
}

// helpExamples returns, per command, the examples of its --help.
func helpExamples(c *cli.Command) ([]docSession, error) {
	var out []docSession
	var errs []error
	var walk func(c *cli.Command, path string)
	walk = func(c *cli.Command, path string) {
		d := docSession{name: path + " --help"}
		for l := range strings.SplitSeq(c.Description, "\n") {
			t := strings.TrimSpace(l)
			if !strings.HasPrefix(l, "  ") || !(strings.HasPrefix(t, "sluice ") || strings.HasPrefix(t, "curl ") || strings.HasPrefix(t, "export ")) {
				continue
			}
			cmd, ok, err := parseCommand(d.name, t)
			if err != nil {
				errs = append(errs, err)
			} else if ok {
				d.cmds = append(d.cmds, cmd)
			}
		}
		if len(d.cmds) > 0 {
			for i := range d.cmds {
				d.cmds[i].where = fmt.Sprintf("%s#%d", d.name, i+1)
			}
			out = append(out, d)
		}
		for _, sub := range c.Commands {
			walk(sub, path+" "+sub.Name)
		}
	}
	walk(c, "sluice")
	return out, errors.Join(errs...)
}

// parseCommand splits a command line from its trailing comment and reads the comment's
// annotations; a line that is only a comment is no command.
func parseCommand(where, line string) (docCmd, bool, error) {
	cmd, comment := splitComment(line)
	cmd = strings.TrimSpace(cmd)
	if cmd == "" {
		return docCmd{}, false, nil
	}
	c := docCmd{where: where, line: cmd}
	comment = strings.TrimSpace(comment)
	if _, r, ok := strings.Cut(comment, "untested:"); ok {
		c.untested = strings.TrimSpace(r)
		if c.untested == "" {
			return c, false, fmt.Errorf("%s: untested needs a reason", where)
		}
	} else if m := exitRe.FindStringSubmatch(comment); m != nil {
		c.exit, _ = strconv.Atoi(m[1])
		c.contains = strings.Trim(m[2], "`")
	}
	return c, true, nil
}

// splitComment cuts line at its first # that begins a shell comment (after white space,
// outside quotes).
func splitComment(line string) (string, string) {
	var quote byte
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i], line[i+1:]
		}
	}
	return line, ""
}

// session runs one document's commands in order.
type session struct {
	bin, dir, config string
	env              map[string]string
	server           *docServer
}

type docServer struct {
	http, grpc string
	stop       func()
}

func newSession(t *testing.T, bin, root string, d docSession) *session {
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	s := &session{bin: bin, dir: dir, config: d.config, env: map[string]string{}}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "SLUICE_") && !strings.HasPrefix(k, "OTEL_") {
			s.env[k] = v
		}
	}
	s.env["PATH"] = filepath.Dir(bin) + string(os.PathListSeparator) + s.env["PATH"]
	s.env["API_KEY"] = "doc-test-api-key"
	t.Cleanup(func() {
		if s.server != nil {
			s.server.stop()
		}
	})
	return s
}

func (s *session) environ() []string {
	var out []string
	for k, v := range s.env {
		out = append(out, k+"="+v)
	}
	return out
}

var (
	goRunRe = regexp.MustCompile(`\bgo run \./cmd/sluice\b`)
	serveRe = regexp.MustCompile(`^sluice serve\b`)
)

func (s *session) run(t *testing.T, c docCmd) {
	line := goRunRe.ReplaceAllString(c.line, "sluice")
	if name, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok && strings.HasPrefix(line, "export ") && !strings.ContainsAny(value, "$`") {
		s.env[name] = strings.Trim(value, `'"`)
		return
	}
	if serveRe.MatchString(line) {
		line = strings.TrimSpace(strings.TrimSuffix(line, "&"))
		if s.server != nil {
			s.server.stop()
		}
		s.server = s.startServer(t, line)
		return
	}
	if s.server == nil {
		serve := "sluice serve"
		if s.config != "" {
			serve += " --config " + s.config
		}
		s.server = s.startServer(t, serve)
	}
	line = strings.ReplaceAll(line, "localhost:8080", s.server.http)
	line = strings.ReplaceAll(line, "localhost:8081", s.server.grpc)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Dir = s.dir
	cmd.Env = append(s.environ(), "SLUICE_SERVER=http://"+s.server.http)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s: %v", c.line, err)
		}
		code = ee.ExitCode()
	}
	if code != c.exit {
		t.Fatalf("%s\n  exit %d, the document states %d; output:\n%s", c.line, code, c.exit, out)
	}
	if c.contains != "" && !bytes.Contains(out, []byte(c.contains)) {
		t.Fatalf("%s\n  output lacks %q, which the document states:\n%s", c.line, c.contains, out)
	}
}

// startServer runs the serve command line on free ports and waits until it says where
// it listens.
func (s *session) startServer(t *testing.T, line string) *docServer {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec "+line)
	cmd.Dir = s.dir
	cmd.Env = append(s.environ(), "SLUICE_HTTP_ADDR=127.0.0.1:0", "SLUICE_GRPC_ADDR=127.0.0.1:0", "SLUICE_LOG_FORMAT=json")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	srv := &docServer{stop: func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}}
	started := make(chan error, 1)
	var log syncBuffer
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.Write(append(sc.Bytes(), '\n'))
			var m struct{ Msg, HTTP, GRPC string }
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Msg == "sluice starting" {
				srv.http, srv.grpc = m.HTTP, m.GRPC
				started <- nil
			}
		}
		select {
		case started <- fmt.Errorf("exited: %v", cmd.Wait()):
		default: // it had started
		}
	}()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, log.String())
		}
	case <-time.After(time.Minute):
		srv.stop()
		t.Fatalf("%s: not started within a minute", line)
	}
	return srv
}
