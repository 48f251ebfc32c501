package main

import (
	"bufio"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// imageBuild is the build the image's Dockerfile runs: its environment and the arguments
// of its go command, with ${VERSION} expanded.
type imageBuild struct {
	env  []string // NAME=value
	args []string // after "go"
	out  string   // the -o path, as the Dockerfile writes it
}

// dockerfileBuild reads the lines between "# BEGIN build" and "# END build" of the
// Dockerfile: ENV lines and one RUN go build line.
func dockerfileBuild(path, version string) (imageBuild, error) {
	var b imageBuild
	f, err := os.Open(path)
	if err != nil {
		return b, err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "# BEGIN build"):
			in = true
		case strings.HasPrefix(line, "# END build"):
			in = false
		case !in || line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "ENV "):
			b.env = append(b.env, strings.Fields(strings.TrimPrefix(line, "ENV "))...)
		case strings.HasPrefix(line, "RUN go "):
			line = strings.ReplaceAll(line, "${VERSION}", version)
			for _, a := range regexp.MustCompile(`[^\s"=]+="[^"]*"|\S+`).FindAllString(strings.TrimPrefix(line, "RUN go "), -1) {
				// -ldflags="..." is one argument without the quotes, as the shell gives it.
				if k, v, ok := strings.Cut(a, `="`); ok {
					a = k + "=" + strings.TrimSuffix(v, `"`)
				}
				b.args = append(b.args, a)
			}
		default:
			return b, fmt.Errorf("%s: unexpected line between BEGIN build and END build: %q", path, line)
		}
	}
	for i, a := range b.args {
		if a == "-o" && i+1 < len(b.args) {
			b.out = b.args[i+1]
		}
	}
	if len(b.args) == 0 || b.args[0] != "build" || b.out == "" {
		return b, fmt.Errorf("%s: no `RUN go build ... -o FILE` between BEGIN build and END build", path)
	}
	return b, nil
}

// command is the go command of b writing the binary to bin, run from the module root as
// the Dockerfile's WORKDIR is.
func (b imageBuild) command(bin string) *exec.Cmd {
	args := append([]string(nil), b.args...)
	for i := range args {
		if args[i] == b.out {
			args[i] = bin
		}
	}
	build := exec.Command("go", args...)
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), b.env...)
	return build
}

// TestImageBinary builds the binary exactly as deploy/Dockerfile does and runs it as the
// image does: without HOME, in a working directory it cannot write, and (when the test
// runs as root) as user 65532 on a read-only root file system. It checks that the build is static and stamped, that serve
// starts and answers /healthz and /readyz, and that `sluice check --health` and
// `--ready`, the image's health checks, exit 0 while it serves and 1 once it has stopped.
// With SLUICE_IMAGE_FILES=DIR it builds into DIR (the Dockerfile's /out), for
// `make image-test` to put in the image.
func TestImageBinary(t *testing.T) {
	const version = "v0.0.0-imagetest"
	b, err := dockerfileBuild(filepath.Join("..", "..", "deploy", "Dockerfile"), version)
	if err != nil {
		t.Fatal(err)
	}
	// User 65532 must reach the binary: open up the test's directory and its parent.
	root := t.TempDir()
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(b.out, "/")))
	files := root // made readable by user 65532 once built
	if dir := os.Getenv("SLUICE_IMAGE_FILES"); dir != "" {
		// make image-test: build into the directory the Dockerfile's prebuilt stage
		// copies to /out.
		rel, ok := strings.CutPrefix(b.out, "/out/")
		if !ok {
			t.Fatalf("the Dockerfile builds %s, not under /out/ where its prebuilt stage puts files", b.out)
		}
		bin, files = filepath.Join(dir, filepath.FromSlash(rel)), dir
	}
	build := b.command(bin)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(build.Args, " "), err, out)
	}
	if err := filepath.WalkDir(files, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			err = os.Chmod(p, 0o755)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}

	// Static (no interpreter, no shared libraries) and built as the Dockerfile says.
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader: it would not run FROM scratch")
		}
	}
	if libs, _ := ef.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	ef.Close()
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("build settings CGO_ENABLED=%q -trimpath=%q, want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
	}

	// The image's environment: no HOME, nothing writable, user 65532. As root, each
	// command runs in a mount namespace of its own whose root file system is remounted
	// read-only, as user 65532 (unshare and setpriv, from util-linux); otherwise as the
	// test's user, in a directory it cannot write.
	cwd := filepath.Join(root, "ro")
	if err := os.Mkdir(cwd, 0o555); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/nonexistent", "TMPDIR=/nonexistent"}
	readOnly := os.Getuid() == 0
	tools := map[string]string{} // absolute paths: the commands run with PATH=/nonexistent
	if readOnly {
		for _, tool := range []string{"unshare", "setpriv", "mount", "sh", "id"} {
			p, err := exec.LookPath(tool)
			if err != nil {
				t.Fatalf("as root this test runs sluice on a read-only root file system with unshare and setpriv: %v (Debian: apt-get install util-linux mount)", err)
			}
			tools[tool] = p
		}
	}
	wrap := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(name, args...)
		if readOnly {
			script := tools["mount"] + ` -o remount,bind,ro / && exec ` + tools["setpriv"] + ` --reuid 65532 --regid 65532 --clear-groups "$0" "$@"`
			cmd = exec.Command(tools["unshare"], append([]string{"--mount", "--propagation", "private", tools["sh"], "-c", script, name}, args...)...)
		}
		cmd.Dir, cmd.Env = cwd, env
		return cmd
	}
	command := func(args ...string) *exec.Cmd { return wrap(bin, args...) }
	if readOnly {
		// The wrapper works: nothing can be written, not even to /tmp.
		probe := filepath.Join(os.TempDir(), "sluice-image-test-probe")
		if out, err := wrap(tools["sh"], "-c", tools["id"]+" -u && : > "+probe).CombinedOutput(); err == nil || !strings.HasPrefix(string(out), "65532\n") {
			os.Remove(probe)
			t.Fatalf("the read-only wrapper did not hold: exit %v, output %q", err, out)
		}
	}
	if out, err := command("version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "sluice "+version+" ") {
		t.Errorf("sluice version: %v: %q, want the stamped %s", err, out, version)
	}

	serve := command("serve", "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--log-format", "json")
	stderr, err := serve.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer serve.Process.Kill()
	httpAddr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "serving HTTP" {
				httpAddr <- m["addr"].(string)
			}
			t.Logf("serve: %s", sc.Text())
		}
	}()
	var base string
	select {
	case a := <-httpAddr:
		base = "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not log \"serving HTTP\" within 30s")
	}
	probe := func(flag string) (int, string) {
		out, err := command("check", flag, "--server", base, "--timeout", "5s").CombinedOutput()
		var ee *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &ee):
			return ee.ExitCode(), string(out)
		}
		t.Fatalf("check %s: %v", flag, err)
		return -1, ""
	}
	if code, out := probe("--health"); code != exitOK || !strings.Contains(out, "/healthz 200") {
		t.Errorf("check --health against a serving server: exit %d: %s", code, out)
	}
	if code, out := probe("--ready"); code != exitOK || !strings.Contains(out, "/readyz 200") {
		t.Errorf("check --ready against a serving server: exit %d: %s", code, out)
	}

	serve.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- serve.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit within 30s of SIGTERM")
	}
	if code, out := probe("--health"); code != exitError {
		t.Errorf("check --health with no server: exit %d, want %d: %s", code, exitError, out)
	}
}

// TestImageScriptSaysWhyItCannotBuild: `make image` (deploy/image.sh build) tells a docker
// CLI whose daemon does not answer from no image builder at all. The PATH it runs with
// holds only what the script needs and, in the first case, a docker that answers `docker
// info` as the CLI does without its daemon.
func TestImageScriptSaysWhyItCannotBuild(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"bash", "dirname", "grep"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "deploy", "image.sh"))
	if err != nil {
		t.Fatal(err)
	}
	build := func() (string, error) {
		cmd := exec.Command(filepath.Join(bin, "bash"), script, "build")
		cmd.Env = []string{"PATH=" + bin, "VERSION=v0.0.0-test"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := build()
	if err == nil || !strings.Contains(out, "no image builder: install docker, podman or buildah") {
		t.Errorf("without docker, podman or buildah: err %v, output %q; want no image builder", err, out)
	}

	daemonDown := "#!" + filepath.Join(bin, "bash") + "\n" +
		`echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2` + "\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(daemonDown), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err = build()
	if err == nil || !strings.Contains(out, "docker is installed but its daemon does not answer (Cannot connect to the Docker daemon") ||
		strings.Contains(out, "no image builder") {
		t.Errorf("docker without its daemon: err %v, output %q; want the daemon named as what is missing", err, out)
	}
}
