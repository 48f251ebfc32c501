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
// # Files
//
// Load takes a file or a directory. In a directory every *.yaml and *.yml file is loaded,
// in name order, except files whose names start with a dot (so a Kubernetes ConfigMap
// volume loads as mounted: its "..data" link and hidden version directories are skipped,
// and the visible links are followed). Each file is one of two formats, recognised by
// content: a file with a top-level "domain" key is an envoyproxy/ratelimit file (one
// domain per file, as there); any other file is a sluice policy file. Both may be mixed in
// one directory. Policy names and domain names must be unique across the files; the
// store, admin and identity blocks may each appear in one file only.
//
// A configuration that loads is immutable. Config.Digest identifies its files' contents.
//
// # Sluice policy files
//
// testdata/policies.yaml is a commented example with every field. In short:
//
//	store:    {redis_url | redis_url_env, deadline, failure_mode, local_share | expected_nodes,
//	           deny_cache: off | {max_bytes, max_age},
//	           request_limits: {max_descriptors, max_entries, max_bytes}}
//	admin:    {token_env, token_file}          # where the admin token is; never the token
//	identity: {trusted_proxies, client_ip_header, ipv6_prefix, api_key_secret_env}
//	policies:
//	  - name, algorithm, rate, period, burst, lease, key, shadow,
//	    failure_mode, local_share | expected_nodes,
//	    tier_header, default_tier, tiers: {name: limit}, identity_tiers: {identity: tier},
//	    routes: {pattern: limit}, overrides: {identity: limit}
//
// An identity (in overrides and identity_tiers) is written as sluice prints it,
// "api_key:<MAC>", "user:<id>" or "ip:<address or prefix>" (`sluice key` prints it), or
// as the bare ID; anything else is a load error. A policy's tier comes from
// identity_tiers, else from tier_header, else default_tier. `sluice proxy` believes every
// header that selects an identity, a tier or a cost (a user key's header, tier_header,
// settle's estimate_header) only from identity.trusted_proxies, by the rule in package
// httplimit's doc ("Trust"): from any other peer, a user-keyed policy limits the client
// address, and the tier and the estimate are the policy's defaults.
//
// A limit is {rate, period, burst, algorithm}: algorithm is a name sluice.ParseAlgorithm
// accepts and defaults to the policy's (gcra by default); period is a Go duration ("1s",
// "90s", "24h") or second, minute, hour, day or week; burst applies only to the bucket
// algorithms. A period of calendar_day, calendar_week, calendar_month or calendar_year
// makes the limit a calendar quota (sluice.Calendar, counted by fixed_window), with the
// optional fields zone (an IANA name, UTC by default) and anchor_day (the day of the
// month, the ISO weekday 1-7, or the day of the year; 31 means the month's last day in
// shorter months); see docs/quotas.md. Every limit is checked with sluice.Limit.Validate. The key is ip (default),
// user or api_key, written as a word or as {type, header}. Routes are net/http ServeMux
// patterns ("GET /v1/items/{id}"), checked by registering them in a ServeMux, so malformed
// and conflicting patterns are load errors; Policy.Route matches a request as ServeMux
// would, on its path normalised as httplimit documents (decoded, ;parameters dropped,
// slashes merged, no trailing slash, lower case). Policy.LimitFor resolves override, tier, default tier and policy limit.
//
// # envoyproxy/ratelimit files
//
// The format of github.com/envoyproxy/ratelimit (README, "The configuration format"):
// domain; descriptors, nested, each with key, optional value, optional rate_limit
// {unit, requests_per_unit, unlimited, name, replaces: [{name}]}, shadow_mode,
// quota_mode, detailed_metric, value_to_metric and share_threshold. Units are second, minute, hour,
// day, week (7 days), month (30 days) and year (365 days), case-insensitive, as the
// reference's UnitToDivider (src/utils/utilities.go) defines them; limits are fixed
// windows aligned to the Unix epoch by default, as there. Two fields are sluice extensions
// inside rate_limit: algorithm, to decide a descriptor with another sluice algorithm, and
// burst, for the bucket algorithms. calendar: true (with zone and anchor_day, as in
// policy files) makes a unit of day, week, month or year a calendar period instead: a
// month from the 1st to the 1st, not 30 days; without it month keeps the reference's 30
// days since the Unix epoch, so that a file behaves exactly as there. A descriptor may
// carry rate_limits instead of rate_limit: a list of rate_limit bodies with optional
// names, all of which apply, all or nothing (Domain.Match returns one Match per limit).
//
// Matching mirrors the reference's GetLimit (src/config/config_impl.go) and
// constructLimitsToCheck (src/service/ratelimit.go):
//
//   - A descriptor's entries are matched level by level from the domain's top-level list.
//     At each level an entry first matches a descriptor with the same key and value, then
//     one whose value is a wildcard ("*", or a prefix such as "foo*") matching the value,
//     then one with the same key and no value (which matches any value). The most specific
//     match wins; there is no backtracking to a less specific sibling at a deeper level.
//   - A rate limit applies only if it is on the descriptor matched by the request's last
//     entry (the request's depth equals the configuration's). A descriptor without
//     rate_limit and without children matches but limits nothing.
//   - unlimited: true answers OK without touching the store (Status Unlimited).
//   - requests_per_unit: 0 denies every request (Status Blocked; no store call is needed).
//   - replaces: every rule matched by any descriptor of one request contributes the names
//     it replaces; each matched, limited rule with such a name is dropped from the set
//     applied to that request (Status Replaced) and is not spent. Unlimited rules are
//     never dropped.
//   - shadow_mode marks the rule; the caller decides and counts but answers OK.
//     quota_mode likewise (Match.Shadow is set for both); the reference then also names
//     the descriptor in its response's dynamic metadata, which sluice does not send.
//   - A descriptor's limit override (RateLimitDescriptor.limit) takes the place of the
//     configuration for that descriptor in a known domain: a fixed window, no shadow, no
//     name. An unknown domain matches nothing.
//   - share_threshold on a wildcard makes every value it matches share one counter;
//     detailed_metric and value_to_metric name the request's values in StatsKey.
//
// Validation follows the reference's loadDescriptors and validateYamlKeys: unknown keys,
// an empty key, two descriptors with the same key and value at one level, an invalid unit,
// a valid unit together with unlimited (an invalid one is ignored there, and warned of
// here), a requests_per_unit that is not a 32-bit unsigned
// integer (even beside unlimited, which ignores its value), an empty replaces name or a
// rule replacing its own name, share_threshold on a value that is not a wildcard, an
// empty or duplicate domain. The reference checks field names against one list for the
// whole file, so a known name where it does not belong (unit on a descriptor, say) is
// ignored there; here too, with a warning. bench's TestReferenceConfigValidation has the
// reference's own checker and Parse judge hundreds of mutated files and finds no other
// difference than those listed next.
//
// Where sluice deliberately differs from the reference:
//
//   - Among several matching prefix wildcards the longest prefix wins; the reference takes
//     the first in file order (which makes a longer prefix listed after a shorter one
//     unreachable). For non-overlapping wildcards the two agree.
//   - Keys and values are compared as pairs. The reference concatenates "key_value", so
//     key "a_b" with value "c" and key "a" with value "b_c" collide there; they do not here,
//     and Match.Key is escaped so counters never collide either.
//   - A wildcard is a value ending in "*"; the reference also treats a key ending in "*"
//     without a value as a wildcard over "key_value", which is not reproduced (such a key
//     is literal, and share_threshold on it is ignored with a warning, where the
//     reference accepts it).
//   - A rate_limit without requests_per_unit is read as 0 (every request denied) and a
//     replaces name that matches no rate_limit replaces nothing, as in the reference, but
//     both are reported in Config.Warnings, which the service logs at every load: the
//     reference accepts them silently, and they are usually a forgotten field or a typo.
//   - Domains cannot be merged across files (the reference's MERGE_DOMAIN_CONFIG).
//
// # Rate Limit Quota Service buckets
//
// The buckets of the Rate Limit Quota Service (package server) are written in either
// format, one domain per name across all files: in a sluice policy file,
//
//	quota_domains:
//	  - domain: edge
//	    buckets:
//	      - name: per-user                 # metrics and logs; default "key=value,..."
//	        bucket_id: {user: "*"}          # keys exactly; values: exact, "*"/"" any, "pre*"
//	        rate: 1000                      # the global limit of each matching bucket id
//	        period: 1s                      # (rate 0 denies all; unlimited: true allows all)
//	        burst: 100                      # default rate/10, at least 1
//	        reporting_interval: 1s          # the filter's, default 1s
//	        assignment_ttl: 3s              # default 3 reporting intervals
//	        no_assignment: allow            # allow | deny
//	        expired_assignment: deny        # allow | deny | reuse_last
//
// and in an envoyproxy/ratelimit file, the same list under a top-level quota_buckets, for
// the file's domain (its field names are checked strictly: the reference knows none of
// them). A file without these sections loads exactly as before. Among the rules with a
// bucket id's keys, the most specific match wins (more exact values, then longer
// prefixes, then file order); each distinct matching id is a bucket of its own, kept
// under a digest of the domain and id (QuotaMatch.Key).
//
// # Errors
//
// Every problem of every file is reported in one load, as an Errors value whose items read
//
//	policies.yaml:12:5: policies[2].rate: must be positive, got 0
//
// (file:line:column, the field's path, the problem). Unknown fields are errors, so a
// misspelt field never passes silently. Limits rejected by sluice.Limit.Validate are
// reported the same way and wrap sluice.ErrInvalidLimit. Use ErrorList to get the items.
//
// # Reloading
//
// A Watcher (see its documentation) reloads on file changes, including editors that
// rename over a file and ConfigMap "..data" swaps, and on demand (Reload, for SIGHUP). A
// configuration with any error is rejected, reported and counted, and the previous one
// stays in force. Readers get the current *Config with one atomic load. Policies, domains
// and failure modes take effect at once; the store block (Redis URL, deadline) is read
// when the service opens its store, at start, so a reload that changes it logs a warning
// that the change waits for a restart.
package config
