// Package config loads sluice's configuration: sluice's own YAML policy files and
// envoyproxy/ratelimit configuration files, read unchanged, from a file or a directory, and
// keeps it current with a Watcher.
//
//	w, err := config.NewWatcher(path, config.WithLogger(logger),
//		config.WithRejectedCounter(rejectedTotal))   // path "" = the built-in config
//	if err != nil { ... }                            // the initial load failed: refuse to start
//	defer w.Close()
//	// on SIGHUP: w.Reload()
//	cfg := w.Config()                                // per request: one atomic load, no lock
//	p, ok := cfg.Policy("api")                       // sluice policies
//	d, ok := cfg.Domain("edge")                      // Envoy domains
//	matches, err := d.Match(descriptors)
//
// [Load] takes a file or a directory (every *.yaml and *.yml not starting with a dot, in
// name order); a file with a top-level "domain" key is an envoyproxy/ratelimit file, any
// other a sluice policy file. A configuration that loads is immutable. [Domain.Match]
// mirrors the reference's matching, but for the differences docs/configuration.md lists;
// that page states both formats, the Rate Limit Quota Service buckets, and the rules of
// matching and validation.
//
// Every problem of every file is reported in one load, as an [Errors] value whose items
// name the file, line, column and field:
//
//	policies.yaml:12:5: policies[2].rate: must be positive, got 0
//
// Unknown fields are errors. Limits rejected by sluice.Limit.Validate wrap
// sluice.ErrInvalidLimit. A [Watcher] rejects a configuration with any error and keeps the
// previous one in force.
package config
