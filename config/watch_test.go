package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/poll"
)

// policyFile is a sluice policy file whose policy "p" has the given rate.
func policyFile(rate int) string {
	return fmt.Sprintf("policies:\n  - name: p\n    rate: %d\n    period: 1s\n", rate)
}

// domainFile is an envoyproxy/ratelimit file whose only rule has the given rate.
func domainFile(rate int) string {
	return fmt.Sprintf("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: %d}\n", rate)
}

func rateOf(c *Config) int64 {
	p, ok := c.Policy("p")
	if !ok {
		return -1
	}
	return p.Limit.Rate
}

type counter struct{ n atomic.Int64 }

func (c *counter) Inc() { c.n.Add(1) }

func newWatcher(t *testing.T, path string, opts ...Option) *Watcher {
	t.Helper()
	w, err := NewWatcher(path, append([]Option{WithDebounce(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// swapConfigMap does what the kubelet does to a ConfigMap volume: write the new files to a
// fresh hidden directory, point a temporary "..data" link at it, rename that link over
// "..data", and remove the old directory.
func swapConfigMap(t *testing.T, mount string, version int, files map[string]string) {
	t.Helper()
	ts := fmt.Sprintf("..2025_01_01_00_00_%02d.%d", version, version)
	dir := filepath.Join(mount, ts)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		writeFile(t, dir, name, content)
	}
	old, _ := os.Readlink(filepath.Join(mount, "..data"))
	tmp := filepath.Join(mount, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(mount, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(mount, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(mount, old)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatcherReloads(t *testing.T) {
	tests := []struct {
		name string
		// setup writes version 1 and returns the path to watch.
		setup func(t *testing.T, dir string) string
		// change writes version 2.
		change func(t *testing.T, dir string)
	}{
		{
			name: "in-place write",
			setup: func(t *testing.T, dir string) string {
				return writeFile(t, dir, "policies.yaml", policyFile(1))
			},
			change: func(t *testing.T, dir string) {
				writeFile(t, dir, "policies.yaml", policyFile(2))
			},
		},
		{
			name: "rename over the file",
			setup: func(t *testing.T, dir string) string {
				return writeFile(t, dir, "policies.yaml", policyFile(1))
			},
			change: func(t *testing.T, dir string) {
				tmp := writeFile(t, dir, ".policies.yaml.swp", policyFile(2))
				if err := os.Rename(tmp, filepath.Join(dir, "policies.yaml")); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "file added to a watched directory",
			setup: func(t *testing.T, dir string) string {
				writeFile(t, dir, "a.yaml", policyFile(1))
				return dir
			},
			change: func(t *testing.T, dir string) {
				if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
					t.Fatal(err)
				}
				writeFile(t, dir, "b.yaml", policyFile(2))
			},
		},
		{
			name: "ConfigMap symlink swap, directory watched",
			setup: func(t *testing.T, dir string) string {
				swapConfigMap(t, dir, 1, map[string]string{"policies.yaml": policyFile(1), "domain.yaml": domainFile(1)})
				return dir
			},
			change: func(t *testing.T, dir string) {
				swapConfigMap(t, dir, 2, map[string]string{"policies.yaml": policyFile(2), "domain.yaml": domainFile(2)})
			},
		},
		{
			name: "ConfigMap symlink swap, one file of the volume watched",
			setup: func(t *testing.T, dir string) string {
				swapConfigMap(t, dir, 1, map[string]string{"policies.yaml": policyFile(1)})
				return filepath.Join(dir, "policies.yaml")
			},
			change: func(t *testing.T, dir string) {
				swapConfigMap(t, dir, 2, map[string]string{"policies.yaml": policyFile(2)})
			},
		},
		{
			name: "directory symlink swapped (runtime root style)",
			setup: func(t *testing.T, dir string) string {
				v1 := filepath.Join(dir, "v1")
				os.Mkdir(v1, 0o755)
				writeFile(t, v1, "policies.yaml", policyFile(1))
				if err := os.Symlink("v1", filepath.Join(dir, "current")); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(dir, "current")
			},
			change: func(t *testing.T, dir string) {
				v2 := filepath.Join(dir, "v2")
				os.Mkdir(v2, 0o755)
				writeFile(t, v2, "policies.yaml", policyFile(2))
				if err := os.Symlink("v2", filepath.Join(dir, "current.tmp")); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(filepath.Join(dir, "current.tmp"), filepath.Join(dir, "current")); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tt.setup(t, dir)
			var reloaded counter
			var seen atomic.Pointer[Config]
			w := newWatcher(t, path, WithReloadedCounter(&reloaded), WithOnReload(func(c *Config) { seen.Store(c) }))
			if got := rateOf(w.Config()); got != 1 {
				t.Fatalf("initial rate %d, want 1", got)
			}
			tt.change(t, dir)
			poll.Until(t, 10*time.Second, "the new configuration", func() bool { return rateOf(w.Config()) == 2 })
			// The callback runs just after the new configuration is in force.
			poll.Until(t, 10*time.Second, "the reload callback", func() bool { return seen.Load() == w.Config() })
			if reloaded.n.Load() < 1 || w.Reloads() < 1 || seen.Load() != w.Config() {
				t.Errorf("reload not reported: counter %d, Reloads %d, callback %p vs %p",
					reloaded.n.Load(), w.Reloads(), seen.Load(), w.Config())
			}
			if w.Rejected() != 0 {
				t.Errorf("%d rejected reloads during a valid change: %v", w.Rejected(), w.LastError())
			}
		})
	}
}

// After a symlinked directory is swapped, the watcher follows the new target: a later edit
// inside it is seen too.
func TestWatcherFollowsSwappedDirectory(t *testing.T) {
	dir := t.TempDir()
	for i, v := range []string{"v1", "v2"} {
		os.Mkdir(filepath.Join(dir, v), 0o755)
		writeFile(t, filepath.Join(dir, v), "policies.yaml", policyFile(i+1))
	}
	os.Symlink("v1", filepath.Join(dir, "current"))
	w := newWatcher(t, filepath.Join(dir, "current"))
	os.Symlink("v2", filepath.Join(dir, "tmp"))
	os.Rename(filepath.Join(dir, "tmp"), filepath.Join(dir, "current"))
	poll.Until(t, 10*time.Second, "v2", func() bool { return rateOf(w.Config()) == 2 })
	writeFile(t, filepath.Join(dir, "v2"), "policies.yaml", policyFile(3))
	poll.Until(t, 10*time.Second, "the edit inside v2", func() bool { return rateOf(w.Config()) == 3 })
}

func TestWatcherRejectsInvalidConfig(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "policies.yaml", policyFile(1))
	var rejected counter
	errs := make(chan error, 10)
	w := newWatcher(t, path, WithRejectedCounter(&rejected), WithOnError(func(err error) { errs <- err }))
	old := w.Config()

	writeFile(t, dir, "policies.yaml", "policies:\n  - name: p\n    rate: -1\n    period: 1s\n")
	var err error
	select {
	case err = <-errs:
	case <-time.After(10 * time.Second):
		t.Fatal("no error reported for an invalid file")
	}
	list := ErrorList(err)
	if len(list) != 1 || list[0].Pos.Line != 3 || list[0].Field != "policies[0].rate" {
		t.Errorf("reported error %v", err)
	}
	if w.Config() != old {
		t.Error("an invalid file replaced the configuration")
	}
	if rejected.n.Load() != 1 || w.Rejected() != 1 || w.LastError() == nil {
		t.Errorf("rejections counted %d / %d, LastError %v", rejected.n.Load(), w.Rejected(), w.LastError())
	}

	// Fixing the file puts the new configuration in force and clears LastError.
	writeFile(t, dir, "policies.yaml", policyFile(5))
	poll.Until(t, 10*time.Second, "the fixed configuration", func() bool { return rateOf(w.Config()) == 5 })
	if w.LastError() != nil {
		t.Errorf("LastError after a good reload: %v", w.LastError())
	}

	// A deleted file is rejected as well; the configuration stays.
	os.Remove(path)
	poll.Until(t, 10*time.Second, "the rejection of a missing file", func() bool { return w.Rejected() == 2 })
	if rateOf(w.Config()) != 5 {
		t.Error("configuration lost when its file was removed")
	}
}

func TestWatcherReloadOnDemand(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "policies.yaml", policyFile(1))
	calls := 0
	w, err := NewWatcher(path, WithDebounce(time.Hour), WithOnReload(func(*Config) { calls++ }))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	// Unchanged files: nothing happens.
	if err := w.Reload(); err != nil || calls != 0 || w.Reloads() != 0 {
		t.Fatalf("Reload of unchanged files: err %v, %d callbacks, %d reloads", err, calls, w.Reloads())
	}
	writeFile(t, dir, "policies.yaml", policyFile(2))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if rateOf(w.Config()) != 2 || calls != 1 {
		t.Errorf("after Reload: rate %d, %d callbacks", rateOf(w.Config()), calls)
	}
	writeFile(t, dir, "policies.yaml", "policies: [")
	if err := w.Reload(); err == nil || ErrorList(err) == nil {
		t.Errorf("Reload of invalid YAML: %v", err)
	}
	if rateOf(w.Config()) != 2 {
		t.Error("invalid reload replaced the configuration")
	}
}

func TestWatcherInitialErrorAndBuiltin(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "policies.yaml", "policies:\n  - name: p\n")
	if _, err := NewWatcher(path); ErrorList(err) == nil {
		t.Errorf("NewWatcher on an invalid file: %v", err)
	}
	w, err := NewWatcher("")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.Config() != Default() || w.Reload() != nil || w.Path() != "" {
		t.Error("the built-in watcher does not serve Default")
	}
}

func TestWatcherStopsOnClose(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "policies.yaml", policyFile(1))
	w, err := NewWatcher(path, WithDebounce(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w.Close() // idempotent
	// A second watcher on the same file is the control: once it has reloaded, the change
	// has been delivered and debounced, and an open watcher would have reloaded too.
	control, err := NewWatcher(path, WithDebounce(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer control.Close()
	writeFile(t, dir, "policies.yaml", policyFile(2))
	poll.Until(t, 10*time.Second, "the control watcher's reload", func() bool { return rateOf(control.Config()) == 2 })
	if rateOf(w.Config()) != 1 {
		t.Error("configuration changed after Close")
	}
}

// Readers running during many reloads always see a whole configuration: the policy file
// and the domain file of one version, never a mix, never nil. Run with -race.
func TestWatcherConcurrentReaders(t *testing.T) {
	dir := t.TempDir()
	swapConfigMap(t, dir, 1, map[string]string{"policies.yaml": policyFile(1), "domain.yaml": domainFile(1)})
	w := newWatcher(t, dir, WithDebounce(time.Millisecond))

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	var torn atomic.Pointer[string]
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := w.Config()
				d, _ := c.Domain("d")
				ms, err := d.Match([]Descriptor{e("k", "v")})
				if err != nil || ms[0].Limit.Rate != rateOf(c) {
					msg := fmt.Sprintf("policy rate %d, domain rate %d (%v)", rateOf(c), ms[0].Limit.Rate, err)
					torn.Store(&msg)
				}
				reads.Add(1)
			}
		})
	}
	const versions = 30
	for v := 2; v <= versions; v++ {
		swapConfigMap(t, dir, v, map[string]string{"policies.yaml": policyFile(v), "domain.yaml": domainFile(v)})
		if v%3 == 0 {
			if err := w.Reload(); err != nil {
				t.Errorf("Reload: %v", err)
			}
		}
		// Each version is in force before the next is written: the swaps interleave with
		// the watcher's reloads rather than coalesce.
		poll.Until(t, 10*time.Second, fmt.Sprintf("version %d", v), func() bool { return rateOf(w.Config()) == int64(v) })
	}
	poll.Until(t, 10*time.Second, "the last version", func() bool { return rateOf(w.Config()) == versions })
	close(stop)
	wg.Wait()
	if msg := torn.Load(); msg != nil {
		t.Errorf("a reader saw a mixed configuration: %s", *msg)
	}
	if reads.Load() == 0 {
		t.Error("no reads")
	}
	if w.Rejected() != 0 {
		t.Errorf("%d rejected reloads: %v", w.Rejected(), w.LastError())
	}
}

// TestWatcherWarnsOfStoreChanges: a reload that changes the store block is applied (its
// policies are in force) and logs that the store keeps its settings until a restart.
func TestWatcherWarnsOfStoreChanges(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "policies.yaml", "store:\n  deadline: 5ms\n"+policyFile(1))
	var logs bytes.Buffer
	w, err := NewWatcher(path, WithDebounce(time.Hour), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	writeFile(t, dir, "policies.yaml", "store:\n  deadline: 5ms\n"+policyFile(2))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "store settings changed") {
		t.Errorf("a reload that kept the store block warned:\n%s", logs.String())
	}
	writeFile(t, dir, "policies.yaml", "store:\n  deadline: 9ms\n"+policyFile(3))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if rateOf(w.Config()) != 3 || w.Config().Store.Deadline != 9*time.Millisecond {
		t.Errorf("after the reload: rate %d, deadline %v", rateOf(w.Config()), w.Config().Store.Deadline)
	}
	if !strings.Contains(logs.String(), "store settings changed") {
		t.Errorf("no warning that the store keeps its settings:\n%s", logs.String())
	}
}

// TestWatcherLogsWarnings: a config's warnings are logged when it is first loaded and
// again when a reload brings it in.
func TestWatcherLogsWarnings(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "envoy.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n")
	var logs bytes.Buffer
	w, err := NewWatcher(path, WithDebounce(time.Hour), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if n := strings.Count(logs.String(), "requests_per_unit: missing"); n != 1 {
		t.Fatalf("%d warnings logged at load, want 1:\n%s", n, logs.String())
	}
	writeFile(t, dir, "envoy.yaml", "domain: d\ndescriptors:\n  - key: b\n    rate_limit:\n      unit: minute\n")
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "requests_per_unit: missing"); n != 2 {
		t.Fatalf("%d warnings logged after the reload, want 2:\n%s", n, logs.String())
	}
}

// syncBuffer is a log sink safe for the watcher's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

// TestWatcherIgnoresOtherFiles: with a single-file configuration, writes to other files in
// its directory reload nothing, and while the configuration is invalid they neither log an
// error nor count a rejection (issue 20, item 8: 59 rejections in 6 s before).
func TestWatcherIgnoresOtherFiles(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "policies.yaml", policyFile(1))
	logs := &syncBuffer{}
	var rejected counter
	w := newWatcher(t, path, WithRejectedCounter(&rejected),
		WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))

	writeFile(t, dir, "policies.yaml", "policies:\n  - name: p\n    rate: -1\n    period: 1s\n")
	// The rejection is counted before it is logged: wait for both.
	poll.Until(t, 10*time.Second, "the rejection counted and logged", func() bool {
		return w.Rejected() == 1 && logs.count("config: reload rejected;") == 1
	})
	before := logs.count("level=ERROR")

	const writes = 20
	for i := range writes {
		writeFile(t, dir, fmt.Sprintf("other-%d.yaml", i%3), policyFile(i))
		writeFile(t, dir, "notes.txt", fmt.Sprint(i))
	}
	// Once every ignored event is counted, no reload can be pending from them (an ignored
	// event does not arm the debounce timer).
	poll.Until(t, 10*time.Second, "the ignored events", func() bool { return w.Ignored() >= 2*writes })
	if n := logs.count("ignored"); n > 1 {
		t.Errorf("%d log records of the %d ignored events, want at most one summary", n, w.Ignored())
	}
	if w.Rejected() != 1 || rejected.n.Load() != 1 {
		t.Errorf("writes to other files counted %d rejections (counter %d), want 1", w.Rejected(), rejected.n.Load())
	}
	if n := logs.count("level=ERROR"); n != before {
		t.Errorf("writes to other files logged %d more errors", n-before)
	}
	// Touching the invalid file again is the same rejection: not logged or counted again.
	writeFile(t, dir, "policies.yaml", "policies:\n  - name: p\n    rate: -1\n    period: 1s\n")
	poll.Until(t, 10*time.Second, "the repeated rejection", func() bool { return logs.count("rejected again") >= 1 })
	if w.Rejected() != 1 || logs.count("level=ERROR") != before {
		t.Errorf("the same invalid file counted %d rejections, %d errors logged", w.Rejected(), logs.count("level=ERROR")-before)
	}
	writeFile(t, dir, "policies.yaml", policyFile(7))
	poll.Until(t, 10*time.Second, "the fixed file", func() bool { return rateOf(w.Config()) == 7 })
	if w.Reloads() != 1 {
		t.Errorf("%d reloads, want 1 (other files reloaded too)", w.Reloads())
	}
}

// TestWatcherFollowsLinksOutOfTheDirectory: an edit to the target of a symbolic link that
// lives outside the watched directory is noticed without SIGHUP, for a directory
// configuration and for a file reached through two links (issue 20, item 8).
func TestWatcherFollowsLinksOutOfTheDirectory(t *testing.T) {
	t.Run("directory with a linked file", func(t *testing.T) {
		root := t.TempDir()
		conf, elsewhere := filepath.Join(root, "conf"), filepath.Join(root, "elsewhere")
		os.Mkdir(conf, 0o755)
		os.Mkdir(elsewhere, 0o755)
		target := writeFile(t, elsewhere, "real.yaml", policyFile(1))
		if err := os.Symlink(target, filepath.Join(conf, "policies.yaml")); err != nil {
			t.Fatal(err)
		}
		w := newWatcher(t, conf)
		writeFile(t, elsewhere, "real.yaml", policyFile(2))
		poll.Until(t, 10*time.Second, "the edit of the link's target", func() bool { return rateOf(w.Config()) == 2 })
	})
	t.Run("file through two links", func(t *testing.T) {
		root := t.TempDir()
		for _, d := range []string{"etc", "a", "b", "c"} {
			os.Mkdir(filepath.Join(root, d), 0o755)
		}
		writeFile(t, filepath.Join(root, "b"), "p.yaml", policyFile(1))
		writeFile(t, filepath.Join(root, "c"), "p.yaml", policyFile(2))
		os.Symlink(filepath.Join(root, "b", "p.yaml"), filepath.Join(root, "a", "p.yaml"))
		os.Symlink(filepath.Join(root, "a", "p.yaml"), filepath.Join(root, "etc", "p.yaml"))
		w := newWatcher(t, filepath.Join(root, "etc", "p.yaml"))
		// Repoint the middle link, outside the configured file's directory.
		tmp := filepath.Join(root, "a", "p.tmp")
		os.Symlink(filepath.Join(root, "c", "p.yaml"), tmp)
		if err := os.Rename(tmp, filepath.Join(root, "a", "p.yaml")); err != nil {
			t.Fatal(err)
		}
		poll.Until(t, 10*time.Second, "the repointed middle link", func() bool { return rateOf(w.Config()) == 2 })
		writeFile(t, filepath.Join(root, "c"), "p.yaml", policyFile(3))
		poll.Until(t, 10*time.Second, "the edit of the new target", func() bool { return rateOf(w.Config()) == 3 })
	})
}
