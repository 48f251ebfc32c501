// Package config loads sluice's configuration, sluice's own YAML policy files and
// envoyproxy/ratelimit files read unchanged, from a file or a directory, and keeps it
// current with a [Watcher]:
//
//	w, err := config.NewWatcher(path, config.WithLogger(logger)) // "" = the built-in config
//	if err != nil { ... }                                        // refuse to start
//	defer w.Close()
//	cfg := w.Config()                                            // per request: one atomic load
//	p, ok := cfg.Policy("api")                                   // sluice policies
//	d, ok := cfg.Domain("edge")                                  // Envoy domains
//	matches, err := d.Match(descriptors)
//
// A configuration that loads is immutable. docs/configuration.md states both formats, the
// Rate Limit Quota Service buckets, and the rules of matching and validation.
//
// Every problem of every file is reported in one load, as an [Errors] value whose items
// name the file, line, column and field; unknown fields are errors:
//
//	policies.yaml:12:5: policies[2].rate: must be positive, got 0
//
// Limits rejected by sluice.Limit.Validate wrap sluice.ErrInvalidLimit. A Watcher keeps
// the previous configuration when a reload has any error.
package config
