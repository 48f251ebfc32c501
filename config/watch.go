package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Counter is what a Watcher counts reloads with. A prometheus.Counter satisfies it, so the
// service can pass one without this package depending on Prometheus.
type Counter interface{ Inc() }

// Option configures a Watcher.
type Option func(*watchOptions)

type watchOptions struct {
	debounce time.Duration
	onReload func(*Config)
	onError  func(error)
	rejected Counter
	reloaded Counter
	logger   *slog.Logger
}

// DefaultDebounce is how long a Watcher waits after the last file-system event before it
// reloads, so that an editor's or kubelet's several writes give one reload.
const DefaultDebounce = 100 * time.Millisecond

// WithDebounce sets the quiet period after file-system events before a reload
// (DefaultDebounce if d <= 0).
func WithDebounce(d time.Duration) Option { return func(o *watchOptions) { o.debounce = d } }

// WithOnReload calls f with each new configuration after it is in force. f runs on the
// reloading goroutine with reloads serialized; it must not call Reload.
func WithOnReload(f func(*Config)) Option { return func(o *watchOptions) { o.onReload = f } }

// WithOnError calls f with the error of each rejected reload (the old configuration stays
// in force). Use ErrorList to get the individual problems. f must not call Reload.
func WithOnError(f func(error)) Option { return func(o *watchOptions) { o.onError = f } }

// WithRejectedCounter counts rejected reloads (invalid or unreadable configuration), for
// example with a prometheus.Counter named sluice_config_reload_rejected_total.
func WithRejectedCounter(c Counter) Option { return func(o *watchOptions) { o.rejected = c } }

// WithReloadedCounter counts successful reloads that changed the configuration.
func WithReloadedCounter(c Counter) Option { return func(o *watchOptions) { o.reloaded = c } }

// WithLogger logs reloads (Info) and rejected reloads (Error) to l. Without it nothing is
// logged.
func WithLogger(l *slog.Logger) Option { return func(o *watchOptions) { o.logger = l } }

// Watcher holds the configuration in force and replaces it when its files change or when
// Reload is called (on SIGHUP, say). Readers call Config, which is one atomic load: they
// never lock and never see a half-loaded configuration.
//
// A new configuration replaces the old one only if it loads without any error; otherwise
// the old one stays, the rejection is counted (Rejected, WithRejectedCounter), logged
// (WithLogger) and reported (WithOnError). A reload whose files are byte-for-byte the same
// (same Config.Digest) changes nothing and calls no callback.
//
// Watching uses fsnotify on the directories holding the configured path, each symbolic
// link met while resolving it and what it resolves to (for a directory, also each of its
// configuration files and their links, which may lead out of it), so that in-place writes,
// editors that rename a new file over the old one, Kubernetes ConfigMap volumes, whose
// "..data" symbolic link is replaced atomically, and edits to a link's target elsewhere
// are all seen. Only events on those paths (and on configuration files new in a watched
// configuration directory) reload: writes to other files in the same directories are
// ignored, and are not logged one record per event (see Ignored), so that a service whose
// log file is in the same directory does not feed its own writes back to itself. Links are
// resolved again after every reload, so a swapped link is followed.
// Events are debounced (WithDebounce). A watched reload rejected with the same error as the
// previous one is neither logged nor counted again; Reload always reports.
type Watcher struct {
	path string
	o    watchOptions

	cur      atomic.Pointer[Config]
	rejectN  atomic.Uint64
	reloadN  atomic.Uint64
	ignoredN atomic.Uint64
	lastErr  atomic.Pointer[errBox]
	mu       sync.Mutex // serializes reloads and the watch set
	fsw      *fsnotify.Watcher
	watching map[string]bool // directories fsnotify watches
	names    map[string]bool // paths whose events matter (rewatch)
	dir      string          // the resolved configuration directory, "" for a file
	// lastSummary and summarized are when the ignored events were last logged and how
	// many had been ignored then; the loop's own.
	lastSummary time.Time
	summarized  uint64
	lastRej     string // the error of the last rejected reload, "" after a good one
	done        chan struct{}
	wg          sync.WaitGroup
	closing     sync.Once
}

type errBox struct{ err error }

// NewWatcher loads the configuration at path (a file or a directory, as Load) and starts
// watching it. An empty path means the built-in configuration (Default), which is never
// watched and which Reload leaves as it is. The error is the initial load's: a service
// should refuse to start on it.
//
// Call Close to stop watching.
func NewWatcher(path string, opts ...Option) (*Watcher, error) {
	w := &Watcher{path: path, watching: map[string]bool{}, done: make(chan struct{})}
	for _, opt := range opts {
		opt(&w.o)
	}
	if w.o.debounce <= 0 {
		w.o.debounce = DefaultDebounce
	}
	if w.o.logger == nil {
		w.o.logger = slog.New(slog.DiscardHandler)
	}
	if path == "" {
		w.cur.Store(Default())
		return w, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	w.path = abs
	cfg, err := Load(abs)
	if err != nil {
		return nil, err
	}
	w.cur.Store(cfg)
	w.warn(cfg)

	w.fsw, err = fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("config: watching %s: %w", path, err)
	}
	w.mu.Lock()
	err = w.rewatch()
	w.mu.Unlock()
	if err != nil {
		w.fsw.Close()
		return nil, fmt.Errorf("config: watching %s: %w", path, err)
	}
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

// Config returns the configuration in force. It never returns nil.
func (w *Watcher) Config() *Config { return w.cur.Load() }

// Path is the watched path (absolute), or "" for the built-in configuration.
func (w *Watcher) Path() string { return w.path }

// Rejected is the number of rejected reloads so far.
func (w *Watcher) Rejected() uint64 { return w.rejectN.Load() }

// Ignored is the number of file-system events so far on files in the watched directories
// that cannot change the configuration (a log file beside it, say). They reload nothing,
// and are logged at most once per IgnoredSummaryEvery, as a count.
func (w *Watcher) Ignored() uint64 { return w.ignoredN.Load() }

// Reloads is the number of reloads that put a new configuration in force.
func (w *Watcher) Reloads() uint64 { return w.reloadN.Load() }

// LastError is the error of the most recent reload attempt, nil when it succeeded (or none
// was made).
func (w *Watcher) LastError() error {
	if b := w.lastErr.Load(); b != nil {
		return b.err
	}
	return nil
}

// Reload loads the configuration again now. It returns nil when the new configuration is in
// force or nothing changed, and the load's error when it was rejected (the old
// configuration stays in force). Safe to call from any goroutine, concurrently with the
// file watcher.
func (w *Watcher) Reload() error {
	_, err := w.reload("reload")
	return err
}

// Close stops watching. Config keeps returning the last configuration.
func (w *Watcher) Close() error {
	var err error
	w.closing.Do(func() {
		close(w.done)
		if w.fsw != nil {
			err = w.fsw.Close()
		}
		w.wg.Wait()
	})
	return err
}

func (w *Watcher) loop() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if !w.relevant(ev.Name) {
				w.ignore(ev)
				continue
			}
			w.o.logger.Debug("config: file event", "event", ev.String())
			timer.Reset(w.o.debounce)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.o.logger.Error("config: file watcher", "err", err)
		case <-timer.C:
			w.reload("watch")
		}
	}
}

// IgnoredSummaryEvery is the least time between two log records of the file-system events
// a Watcher ignores.
const IgnoredSummaryEvery = time.Minute

// ignore counts an event on a file that cannot change the configuration, and logs (at
// Debug) at most one record per IgnoredSummaryEvery of how many were ignored: a service
// whose log file sits beside its configuration writes a record for each event, and each
// record is itself an event. Called on the loop's goroutine only.
func (w *Watcher) ignore(ev fsnotify.Event) {
	n := w.ignoredN.Add(1)
	now := time.Now()
	if !w.lastSummary.IsZero() && now.Sub(w.lastSummary) < IgnoredSummaryEvery {
		return
	}
	w.o.logger.Debug("config: file events on other files ignored", "events", n-w.summarized, "last", ev.String(),
		"next_summary_in", IgnoredSummaryEvery)
	w.lastSummary, w.summarized = now, n
}

func (w *Watcher) reload(trigger string) (bool, error) {
	if w.path == "" {
		return false, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	cfg, err := Load(w.path)
	if werr := w.rewatch(); werr != nil {
		w.o.logger.Error("config: watching", "path", w.path, "err", werr)
	}
	if err != nil {
		w.lastErr.Store(&errBox{err})
		if trigger == "watch" && err.Error() == w.lastRej {
			// The same rejection again (a touch, an editor's second write): it is already
			// logged and counted.
			w.o.logger.Debug("config: reload rejected again with the same error", "path", w.path)
			return false, err
		}
		w.lastRej = err.Error()
		w.rejectN.Add(1)
		if w.o.rejected != nil {
			w.o.rejected.Inc()
		}
		w.o.logger.Error("config: reload rejected; the previous configuration stays in force",
			"path", w.path, "trigger", trigger, "err", err)
		if w.o.onError != nil {
			w.o.onError(err)
		}
		return false, err
	}
	w.lastErr.Store(nil)
	w.lastRej = ""
	old := w.cur.Load()
	if old != nil && old.Digest == cfg.Digest {
		return false, nil
	}
	w.cur.Store(cfg)
	w.reloadN.Add(1)
	if w.o.reloaded != nil {
		w.o.reloaded.Inc()
	}
	w.o.logger.Info("config: reloaded", "path", w.path, "trigger", trigger,
		"files", len(cfg.Files), "policies", len(cfg.Policies), "domains", len(cfg.Domains), "digest", cfg.Digest[:12])
	w.warn(cfg)
	if old != nil && old.Store != cfg.Store {
		// The store is opened once, at start; policies and domains change in place.
		w.o.logger.Warn("config: the store settings changed; the running store keeps the old ones until the service restarts",
			"path", w.path)
	}
	if w.o.onReload != nil {
		w.o.onReload(cfg)
	}
	return true, nil
}

// rewatch makes the fsnotify watch set match the paths that matter now, and records their
// names (relevant) so that events on other files are ignored. The paths are every symbolic
// link met while resolving the configured path and the file or directory it ends at; for a
// directory, also each *.yaml/*.yml entry and the links it resolves through (a link may
// lead out of the directory). fsnotify watches directories, so the watch set is the
// resolved directories holding those paths. Called with w.mu held.
func (w *Watcher) rewatch() error {
	names := map[string]bool{}
	dirs := map[string]bool{}
	add := func(p string) {
		d := filepath.Dir(p)
		if r, err := filepath.EvalSymlinks(d); err == nil {
			d = r
		} else {
			return // its directory is gone too: the parent's own entry covers its return
		}
		names[filepath.Join(d, filepath.Base(p))] = true
		dirs[d] = true
	}
	chain := linkChain(w.path)
	for _, p := range chain {
		add(p)
	}
	w.dir = ""
	if real := chain[len(chain)-1]; isDir(real) {
		if r, err := filepath.EvalSymlinks(real); err == nil {
			w.dir = r
			dirs[r] = true
			entries, _ := os.ReadDir(r)
			for _, e := range entries {
				if configName(e.Name()) || e.Name() == "..data" {
					for _, p := range linkChain(filepath.Join(r, e.Name())) {
						add(p)
					}
				}
			}
		}
	}
	w.names = names
	var errs []error
	for d := range w.watching {
		if !dirs[d] {
			_ = w.fsw.Remove(d) // may already be gone with its directory
			delete(w.watching, d)
		}
	}
	for d := range dirs {
		if w.watching[d] {
			continue
		}
		if err := w.fsw.Add(d); err != nil {
			errs = append(errs, err)
			continue
		}
		w.watching[d] = true
	}
	if len(w.watching) == 0 {
		errs = append(errs, fmt.Errorf("nothing to watch for %s", w.path))
	}
	return errors.Join(errs...)
}

// relevant reports whether a file-system event on name can change the configuration: name
// is on the resolution path of the configuration (see rewatch), or is a configuration file
// new in a watched configuration directory.
func (w *Watcher) relevant(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names[name] {
		return true
	}
	return w.dir != "" && filepath.Dir(name) == w.dir && (configName(filepath.Base(name)) || filepath.Base(name) == "..data")
}

// configName reports whether a directory entry is one Load reads.
func configName(name string) bool { return !strings.HasPrefix(name, ".") && isYAMLName(name) }

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// linkChain resolves p (absolute) one symbolic link at a time and returns each link met,
// then the path it ends at (which may not exist). Every element is a path whose change
// changes what p reads.
func linkChain(p string) []string {
	var out []string
	sep := string(filepath.Separator)
	for hops := 0; hops < 64; hops++ {
		parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), sep), sep)
		cur := sep
		next := ""
		for i, part := range parts {
			q := filepath.Join(cur, part)
			st, err := os.Lstat(q)
			if err != nil {
				return append(out, p)
			}
			if st.Mode()&os.ModeSymlink == 0 {
				cur = q
				continue
			}
			target, err := os.Readlink(q)
			if err != nil {
				return append(out, p)
			}
			out = append(out, q)
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			next = filepath.Join(append([]string{target}, parts[i+1:]...)...)
			break
		}
		if next == "" {
			return append(out, p)
		}
		p = next
	}
	return append(out, p)
}

// warn logs each of cfg's warnings.
func (w *Watcher) warn(cfg *Config) {
	for _, e := range cfg.Warnings {
		w.o.logger.Warn("config: accepted as envoyproxy/ratelimit does, but probably a mistake", "at", e.Error())
	}
}
