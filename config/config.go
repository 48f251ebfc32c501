package config

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/keys"
	"go.yaml.in/yaml/v3"
)

// Config is one loaded configuration: sluice policies, envoyproxy/ratelimit domains and
// the service settings. A *Config is immutable once returned: share it freely between
// goroutines and never modify it (its slices included). A reload builds a new Config.
type Config struct {
	// Store is where limits are kept and how store failures are handled by default.
	Store Store
	// Admin says where the admin token comes from.
	Admin Admin
	// Identity says how clients are identified (client IP, API-key hashing).
	Identity Identity
	// Overload is the overload block: the adaptive concurrency limit of `sluice proxy`.
	// Nil when no file has one.
	Overload *Overload
	// Policies are the sluice policies in load order (files by name, then file order).
	Policies []*Policy
	// Domains are the envoyproxy/ratelimit domains, sorted by name.
	Domains []*Domain
	// QuotaDomains are the Rate Limit Quota Service domains (quota_domains in sluice
	// policy files, quota_buckets in envoyproxy/ratelimit files), sorted by name.
	QuotaDomains []*QuotaDomain
	// Files are the files the configuration was loaded from, in load order. The built-in
	// default's files are named "builtin/<name>".
	Files []string
	// Warnings are what envoyproxy/ratelimit accepts, and so does this package, but is
	// most likely a mistake (docs/configuration.md lists them).
	Warnings Errors
	// Digest is the hex SHA-256 of the names and contents of Files: equal digests, equal
	// files.
	Digest string

	policies     map[string]*Policy
	domains      map[string]*Domain
	quotaDomains map[string]*QuotaDomain
}

// Policy returns the policy with that name.
func (c *Config) Policy(name string) (*Policy, bool) {
	p, ok := c.policies[name]
	return p, ok
}

// Domain returns the envoyproxy/ratelimit domain with that name.
func (c *Config) Domain(name string) (*Domain, bool) {
	d, ok := c.domains[name]
	return d, ok
}

// Failure resolves the failure handling of one limit; every front end calls it. p is the
// limit's policy (nil for an Envoy domain or no policy); flag is --failure-mode
// (sluice.FailInherit when not given). The mode is the policy's [Policy.FailureMode],
// else flag, else store.failure_mode, else sluice.FailOpen; the local share is the
// policy's [Policy.LocalShare], else store.local_share, else 1. A nil Config has no
// store block.
func (c *Config) Failure(p *Policy, flag sluice.FailureMode) sluice.Failure {
	var own, store sluice.Failure
	if p != nil {
		own = sluice.Failure{Mode: p.FailureMode, Share: p.LocalShare}
	}
	if c != nil {
		store = sluice.Failure{Mode: c.Store.FailureMode, Share: c.Store.LocalShare}
	}
	return own.Or(sluice.Failure{Mode: flag}).Or(store).Or(sluice.Failure{Mode: sluice.FailOpen, Share: 1})
}

// Store holds the store settings of the top-level "store" block.
type Store struct {
	// RedisURL is the Redis URL (redis://, rediss://, unix://), read from RedisURLEnv
	// when the file names it. Empty means the in-memory store.
	RedisURL string
	// RedisURLEnv is the environment variable RedisURL was read from, if any.
	RedisURLEnv string
	// Deadline is the longest a decision may wait for the store; 0 means the default of
	// the failover package.
	Deadline time.Duration
	// FailureMode and LocalShare are store.failure_mode and store.local_share (or
	// 1/store.expected_nodes) as written, unset when zero; see [Config.Failure].
	FailureMode sluice.FailureMode
	LocalShare  float64
	// DenyCache is deny_cache (package denycache); zero leaves the service's defaults.
	DenyCache DenyCache
	// RequestLimits is request_limits; zero fields take the service's flags, else the
	// defaults.
	RequestLimits RequestLimits
}

// RequestLimits caps one rate limit request (Envoy's ShouldRateLimit, the JSON API's
// /v1/check, /v1/peek and /v1/reset): a request over a cap is refused before any work
// (gRPC InvalidArgument, HTTP 400) and spends nothing. A zero field means its default.
type RequestLimits struct {
	// MaxDescriptors bounds the descriptors of one request.
	MaxDescriptors int `json:"max_descriptors,omitempty"`
	// MaxEntries bounds the entries of one descriptor.
	MaxEntries int `json:"max_entries,omitempty"`
	// MaxBytes bounds the bytes of every entry's key and value of one request together,
	// and the body of a JSON request.
	MaxBytes int `json:"max_bytes,omitempty"`
}

// Default request limits: far above what Envoy sends, far below what costs the heap.
const (
	DefaultMaxDescriptors = 256
	DefaultMaxEntries     = 32
	DefaultMaxBytes       = 256 << 10
)

// Or returns l with each zero field taken from def, and the defaults for those still zero.
func (l RequestLimits) Or(def RequestLimits) RequestLimits {
	pick := func(v, d, builtin int) int { return cmp.Or(max(v, 0), max(d, 0), builtin) }
	return RequestLimits{
		MaxDescriptors: pick(l.MaxDescriptors, def.MaxDescriptors, DefaultMaxDescriptors),
		MaxEntries:     pick(l.MaxEntries, def.MaxEntries, DefaultMaxEntries),
		MaxBytes:       pick(l.MaxBytes, def.MaxBytes, DefaultMaxBytes),
	}
}

// DenyCache is the store block's deny_cache: {max_bytes, max_age}, or deny_cache: off.
type DenyCache struct {
	// Off: deny_cache: off, or max_bytes: 0.
	Off bool
	// MaxBytes bounds the cache's memory; 0 means the service's default.
	MaxBytes int64
	// MaxAge is the longest a remembered denial answers without asking the store; 0
	// means the service's default.
	MaxAge time.Duration
}

// Admin says where the token guarding admin endpoints comes from: an environment variable
// or a file (a mounted Secret), read at each Token call so it can rotate without a reload.
type Admin struct {
	TokenEnv  string `json:"token_env,omitempty"`
	TokenFile string `json:"token_file,omitempty"`
}

// ErrNoAdminToken is returned by Admin.Token when no source yields a token; admin
// endpoints then refuse every request.
var ErrNoAdminToken = errors.New("config: no admin token configured")

// Token reads the admin token now: the environment variable TokenEnv, else the file
// TokenFile (surrounding white space trimmed). It returns an error wrapping ErrNoAdminToken
// when neither yields a non-empty token.
func (a Admin) Token() (string, error) {
	var empty []string
	if a.TokenEnv != "" {
		if t := strings.TrimSpace(os.Getenv(a.TokenEnv)); t != "" {
			return t, nil
		}
		empty = append(empty, "$"+a.TokenEnv+" is empty")
	}
	if a.TokenFile != "" {
		b, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrNoAdminToken, err)
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			return t, nil
		}
		empty = append(empty, a.TokenFile+" is empty")
	}
	if empty == nil {
		return "", ErrNoAdminToken
	}
	return "", fmt.Errorf("%w: %s", ErrNoAdminToken, strings.Join(empty, " and "))
}

// Identity is the top-level "identity" block: how the keys package finds who a client is.
type Identity struct {
	// TrustedProxies are the peers whose ClientIPHeader (and a policy's tier_header) is
	// believed. Empty: forwarding headers are ignored.
	TrustedProxies []netip.Prefix `json:"trusted_proxies"`
	// ClientIPHeader is the one forwarding header believed (keys.ClientIP.Header):
	// X-Forwarded-For (the default), X-Real-IP or Forwarded.
	ClientIPHeader string `json:"client_ip_header,omitempty"`
	// IPv6Prefix is the prefix length IPv6 clients are aggregated to (default 64).
	IPv6Prefix int `json:"ipv6_prefix"`
	// APIKeySecretEnv names the environment variable holding the API keys' HMAC secret.
	// Empty: a per-process random secret.
	APIKeySecretEnv string `json:"api_key_secret_env,omitempty"`
}

// DefaultIPv6Prefix is Identity.IPv6Prefix when the file sets none.
const DefaultIPv6Prefix = 64

// File is one configuration file's name and content, for Parse.
type File struct {
	Name string
	Data []byte
}

// Load reads a configuration from path: a file, or a directory whose *.yaml and *.yml
// files (not dot files, not subdirectories) are each a sluice policy file or an
// envoyproxy/ratelimit file. Symbolic links are followed, so a Kubernetes ConfigMap
// volume loads as mounted. The error, when not about reading files, is an [Errors].
func Load(path string) (*Config, error) {
	files, err := readFiles(path)
	if err != nil {
		return nil, err
	}
	return Parse(files...)
}

func readFiles(path string) ([]File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if !info.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		return []File{{Name: path, Data: data}}, nil
	}
	// Read from one snapshot of a ConfigMap's "..data" link; again if it moved meanwhile.
	for attempt := 0; ; attempt++ {
		files, stable, err := readDirOnce(path)
		if stable || attempt == 4 {
			if err != nil {
				return nil, err
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("config: no .yaml or .yml files in directory %s", path)
			}
			return files, nil
		}
	}
}

// readDirOnce reads the configuration files of a directory and reports whether the
// directory's links stayed put meanwhile.
func readDirOnce(path string) (files []File, stable bool, err error) {
	resolve := func() (real, data string) {
		real, _ = filepath.EvalSymlinks(path)
		if real != "" {
			data, _ = filepath.EvalSymlinks(filepath.Join(real, "..data"))
		}
		return real, data
	}
	real, dataDir := resolve()
	defer func() {
		r2, d2 := resolve()
		stable = r2 == real && d2 == dataDir
	}()
	if real == "" {
		return nil, false, fmt.Errorf("config: %s: cannot resolve", path)
	}
	entries, err := os.ReadDir(real)
	if err != nil {
		return nil, false, fmt.Errorf("config: %w", err)
	}
	sep := string(filepath.Separator)
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !isYAMLName(name) {
			continue
		}
		src := filepath.Join(real, name)
		if dataDir != "" {
			if target, err := os.Readlink(src); err == nil && strings.HasPrefix(target, "..data"+sep) {
				src = filepath.Join(dataDir, strings.TrimPrefix(target, "..data"+sep))
			}
		}
		st, err := os.Stat(src) // follows symlinks
		if err != nil {
			return nil, false, fmt.Errorf("config: %s: %w", filepath.Join(path, name), err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, false, fmt.Errorf("config: %w", err)
		}
		files = append(files, File{Name: filepath.Join(path, name), Data: data})
	}
	return files, false, nil
}

func isYAMLName(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// Parse builds a configuration from files in memory, in the given order, each read as
// [Load] reads it; all problems of all files are returned together as an [Errors].
func Parse(files ...File) (*Config, error) {
	c := &Config{
		Identity:     Identity{IPv6Prefix: DefaultIPv6Prefix, ClientIPHeader: keys.HeaderXForwardedFor},
		policies:     map[string]*Policy{},
		domains:      map[string]*Domain{},
		quotaDomains: map[string]*QuotaDomain{},
	}
	var errs Errors
	h := sha256.New()
	m := &merger{cfg: c}
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s\n%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
		c.Files = append(c.Files, f.Name)

		d := &decoder{file: f.Name}
		root := d.parse(f.Data)
		if root != nil {
			if isEnvoyFile(root) {
				d.envoy = true
				// Merged even with errors, so that conflicts between files are reported too.
				if dom := d.envoyDomain(root); dom != nil && dom.Name != "" {
					m.addDomain(d, dom)
					if dom.quota != nil {
						m.addQuotaDomain(d, dom.quota)
					}
				}
			} else if sf := d.sluiceFile(root); sf != nil {
				m.addSluiceFile(d, sf)
			}
		}
		errs = append(errs, d.errs...)
		c.Warnings = append(c.Warnings, d.warns...)
	}
	if len(files) == 0 {
		errs = append(errs, &Error{Msg: "no configuration files"})
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	m.finish()
	if err := checkInherited(c).err(); err != nil {
		return nil, err
	}
	c.Digest = hex.EncodeToString(h.Sum(nil))
	return c, nil
}

func isEnvoyFile(root *yaml.Node) bool {
	for i := 0; root.Kind == yaml.MappingNode && i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "domain" {
			return true
		}
	}
	return false
}

// merger combines the files of one load, checking what must be unique across files.
type merger struct {
	cfg                       *Config
	storeAt, adminAt, identAt *Position
	overloadAt                *Position
}

func (m *merger) addDomain(d *decoder, dom *Domain) {
	if prev, dup := m.cfg.domains[dom.Name]; dup {
		d.errorf(dom.nameNode, "domain", "duplicate domain %q (already defined at %s)", dom.Name, prev.Pos)
		return
	}
	m.cfg.domains[dom.Name] = dom
	m.cfg.Domains = append(m.cfg.Domains, dom)
}

func (m *merger) addQuotaDomain(d *decoder, qd *QuotaDomain) {
	if prev, dup := m.cfg.quotaDomains[qd.Name]; dup {
		d.errorf(qd.nameNode, qd.nameField, "duplicate quota domain %q (already defined at %s)", qd.Name, prev.Pos)
		return
	}
	m.cfg.quotaDomains[qd.Name] = qd
	m.cfg.QuotaDomains = append(m.cfg.QuotaDomains, qd)
}

func (m *merger) addSluiceFile(d *decoder, sf *sluiceFile) {
	once := func(set bool, n *yaml.Node, field string, at **Position) bool {
		if !set {
			return false
		}
		if *at != nil {
			d.errorf(n, field, "already set in %s; set it in one file only", **at)
			return false
		}
		p := d.pos(n)
		*at = &p
		return true
	}
	if once(sf.store != nil, sf.storeNode, "store", &m.storeAt) {
		m.cfg.Store = *sf.store
	}
	if once(sf.admin != nil, sf.adminNode, "admin", &m.adminAt) {
		m.cfg.Admin = *sf.admin
	}
	if once(sf.identity != nil, sf.identityNode, "identity", &m.identAt) {
		m.cfg.Identity = *sf.identity
	}
	if once(sf.overload != nil, sf.overloadNode, "overload", &m.overloadAt) {
		m.cfg.Overload = sf.overload
	}
	for _, p := range sf.policies {
		if prev, dup := m.cfg.policies[p.Name]; dup {
			d.errorf(p.nameNode, p.path+".name", "duplicate policy %q (already defined at %s)", p.Name, prev.Pos)
			continue
		}
		m.cfg.policies[p.Name] = p
		m.cfg.Policies = append(m.cfg.Policies, p)
	}
	for _, qd := range sf.quotas {
		m.addQuotaDomain(d, qd)
	}
}

// finish sorts what the files gave in any order. Inherited settings stay unset.
func (m *merger) finish() {
	slices.SortFunc(m.cfg.Domains, func(a, b *Domain) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(m.cfg.QuotaDomains, func(a, b *QuotaDomain) int { return strings.Compare(a.Name, b.Name) })
}
