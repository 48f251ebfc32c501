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

// Counter is what a Watcher counts reloads with; a prometheus.Counter satisfies it.
type Counter interface{ Inc() }

// Option configures a Watcher.
type Option func(*Watcher)

// DefaultDebounce is how long a Watcher waits after the last file-system event before it
// reloads, so that an editor's several writes give one reload.
const DefaultDebounce = 100 * time.Millisecond

// WithDebounce sets the quiet period after file-system events before a reload
// (DefaultDebounce if d <= 0).
func WithDebounce(d time.Duration) Option { return func(w *Watcher) { w.debounce = d } }

// WithOnReload calls f with each new configuration after it is in force, on the
// reloading goroutine; f must not call Reload.
func WithOnReload(f func(*Config)) Option { return func(w *Watcher) { w.onReload = f } }

// WithOnError calls f with the error of each rejected reload; f must not call Reload.
func WithOnError(f func(error)) Option { return func(w *Watcher) { w.onError = f } }

// WithRejectedCounter counts rejected reloads (sluice_config_reload_rejected_total).
func WithRejectedCounter(c Counter) Option { return func(w *Watcher) { w.rejected = c } }

// WithReloadedCounter counts successful reloads that changed the configuration.
func WithReloadedCounter(c Counter) Option { return func(w *Watcher) { w.reloaded = c } }

// WithLogger logs reloads (Info) and rejected reloads (Error) to l; by default nothing.
func WithLogger(l *slog.Logger) Option { return func(w *Watcher) { w.logger = l } }

// Watcher holds the configuration in force and replaces it when its files change or
// Reload is called. Config is one atomic load: readers never lock and never see a
// half-loaded configuration.
//
// A new configuration replaces the old one only if it loads without any error; otherwise
// the old one stays, and the rejection is counted, logged and reported to WithOnError
// (a watched reload rejected with the same error as the previous one only once). A
// reload with the same Config.Digest changes nothing and calls no callback.
//
// The Watcher follows every symbolic link on the way to the configured path and, for a
// directory, to each of its configuration files, so in-place writes, renames over the
// old file and Kubernetes ConfigMap volumes (a "..data" link swapped atomically) are all
// seen; links are resolved again after every reload. Events on other files in the same
// directories reload nothing and are only counted (Ignored). Events are debounced.
type Watcher struct {
	path     string
	debounce time.Duration
	onReload func(*Config)
	onError  func(error)
	rejected Counter
	reloaded Counter
	logger   *slog.Logger

	cur      atomic.Pointer[Config]
	rejectN  atomic.Uint64
	reloadN  atomic.Uint64
	ignoredN atomic.Uint64
	lastErr  atomic.Pointer[error]
	mu       sync.Mutex // serializes reloads and the watch set
	fsw      *fsnotify.Watcher
	watching map[string]bool // directories fsnotify watches
	names    map[string]bool // paths whose events matter (rewatch)
	dir      string          // the resolved configuration directory, "" for a file
	// when ignored events were last logged, and their count then; the loop's own
	lastSummary time.Time
	summarized  uint64
	lastRej     string // the error of the last rejected reload, "" after a good one
	done        chan struct{}
	wg          sync.WaitGroup
	closing     sync.Once
}

// NewWatcher loads the configuration at path (as Load) and watches it until Close. An
// empty path means the built-in configuration (Default), never watched or reloaded. The
// error is the initial load's: a service should refuse to start on it.
func NewWatcher(path string, opts ...Option) (*Watcher, error) {
	w := &Watcher{path: path, watching: map[string]bool{}, done: make(chan struct{})}
	for _, opt := range opts {
		opt(w)
	}
	if w.debounce <= 0 {
		w.debounce = DefaultDebounce
	}
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
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
// that cannot change the configuration (a log file beside it, say).
func (w *Watcher) Ignored() uint64 { return w.ignoredN.Load() }

// Reloads is the number of reloads that put a new configuration in force.
func (w *Watcher) Reloads() uint64 { return w.reloadN.Load() }

// LastError is the error of the most recent reload attempt; nil if it succeeded.
func (w *Watcher) LastError() error {
	if p := w.lastErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Reload loads the configuration again now, from any goroutine. It returns the load's
// error when the new configuration was rejected.
func (w *Watcher) Reload() error {
	return w.reload("reload")
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
			w.logger.Debug("config: file event", "event", ev.String())
			timer.Reset(w.debounce)
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			w.logger.Error("config: file watcher", "err", err)
		case <-timer.C:
			w.reload("watch")
		}
	}
}

// IgnoredSummaryEvery is the least time between two Debug records counting the
// file-system events a Watcher ignored.
const IgnoredSummaryEvery = time.Minute

// ignore counts an event that cannot change the configuration, logged at most once per
// IgnoredSummaryEvery (a log file beside the configuration must not feed itself).
// Called on the loop's goroutine only.
func (w *Watcher) ignore(ev fsnotify.Event) {
	n := w.ignoredN.Add(1)
	now := time.Now()
	if !w.lastSummary.IsZero() && now.Sub(w.lastSummary) < IgnoredSummaryEvery {
		return
	}
	w.logger.Debug("config: file events on other files ignored", "events", n-w.summarized, "last", ev.String(),
		"next_summary_in", IgnoredSummaryEvery)
	w.lastSummary, w.summarized = now, n
}

func (w *Watcher) reload(trigger string) error {
	if w.path == "" {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	cfg, err := Load(w.path)
	if werr := w.rewatch(); werr != nil {
		w.logger.Error("config: watching", "path", w.path, "err", werr)
	}
	if err != nil {
		w.lastErr.Store(&err)
		if trigger == "watch" && err.Error() == w.lastRej {
			// The same rejection again (an editor's second write): already reported.
			w.logger.Debug("config: reload rejected again with the same error", "path", w.path)
			return err
		}
		w.lastRej = err.Error()
		w.rejectN.Add(1)
		if w.rejected != nil {
			w.rejected.Inc()
		}
		w.logger.Error("config: reload rejected; the previous configuration stays in force",
			"path", w.path, "trigger", trigger, "err", err)
		if w.onError != nil {
			w.onError(err)
		}
		return err
	}
	w.lastErr.Store(nil)
	w.lastRej = ""
	old := w.cur.Load()
	if old != nil && old.Digest == cfg.Digest {
		return nil
	}
	w.cur.Store(cfg)
	w.reloadN.Add(1)
	if w.reloaded != nil {
		w.reloaded.Inc()
	}
	w.logger.Info("config: reloaded", "path", w.path, "trigger", trigger,
		"files", len(cfg.Files), "policies", len(cfg.Policies), "domains", len(cfg.Domains), "digest", cfg.Digest[:12])
	w.warn(cfg)
	if old != nil && old.Store != cfg.Store {
		// The store is opened once, at start; policies and domains change in place.
		w.logger.Warn("config: the store settings changed; the running store keeps the old ones until the service restarts",
			"path", w.path)
	}
	if w.onReload != nil {
		w.onReload(cfg)
	}
	return nil
}

// rewatch makes the fsnotify watch set the directories holding the paths that matter now
// (the links on the way to the configured path and to each configuration file of its
// directory, and what they end at), and records those paths for relevant. Called with
// w.mu held.
func (w *Watcher) rewatch() error {
	names := map[string]bool{}
	dirs := map[string]bool{}
	add := func(chain []string) {
		for _, p := range chain {
			d, err := filepath.EvalSymlinks(filepath.Dir(p))
			if err != nil {
				continue // its directory is gone too: the parent's own entry covers its return
			}
			names[filepath.Join(d, filepath.Base(p))] = true
			dirs[d] = true
		}
	}
	chain := linkChain(w.path)
	add(chain)
	w.dir = ""
	r := chain[len(chain)-1]
	if st, err := os.Stat(r); err == nil && st.IsDir() {
		w.dir = r
		dirs[r] = true
		entries, _ := os.ReadDir(r)
		for _, e := range entries {
			if watchedName(e.Name()) {
				add(linkChain(filepath.Join(r, e.Name())))
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

// relevant reports whether an event on name can change the configuration: name is one
// of rewatch's paths, or a configuration file new in the configuration directory.
func (w *Watcher) relevant(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.names[name] {
		return true
	}
	return w.dir != "" && filepath.Dir(name) == w.dir && watchedName(filepath.Base(name))
}

// watchedName reports whether a directory entry is one Load reads, or a ConfigMap's
// "..data" link.
func watchedName(name string) bool {
	return name == "..data" || !strings.HasPrefix(name, ".") && isYAMLName(name)
}

// linkChain resolves p (absolute) one symbolic link at a time and returns each link met,
// then the path it ends at, which holds no link (and may not exist).
func linkChain(p string) []string {
	var out []string
	sep := string(filepath.Separator)
	for hops := 0; hops < 64; hops++ {
		parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), sep), sep)
		cur, next := sep, ""
		for i, part := range parts {
			q := filepath.Join(cur, part)
			target, err := os.Readlink(q)
			if err != nil { // not a link, or not there
				cur = q
				continue
			}
			out = append(out, q)
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			next = filepath.Join(append([]string{target}, parts[i+1:]...)...)
			break
		}
		if next == "" {
			break
		}
		p = next
	}
	return append(out, p)
}

// warn logs each of cfg's warnings.
func (w *Watcher) warn(cfg *Config) {
	for _, e := range cfg.Warnings {
		w.logger.Warn("config: accepted as envoyproxy/ratelimit does, but probably a mistake", "at", e.Error())
	}
}
