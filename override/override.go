// Package override holds limits changed at run time: per identity of a policy, or per
// pattern of identities, set through the admin API and kept in the store, so that every
// replica applies them.
//
// A Set is the overrides in force, indexed for the decision path. Identities are those
// the policy limits (keys.Identity.ID: an IP address or prefix, a user ID, an API key's
// MAC). An identity ending in '*' is a pattern matching every identity with the text
// before it as prefix ("org-42:*"; "*" alone matches all). The most specific override
// wins: an exact identity before any pattern, and among patterns the longest prefix.
//
// A Store keeps overrides: Memory in the process, Redis in one hash that every replica
// polls (see Redis). An override with an expiry is ignored from that instant and deleted
// at the next refresh.
package override

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// Override is one limit set at run time.
type Override struct {
	Policy string `json:"policy"`
	// Identity is the identity or pattern, normalised (an API key's MAC, never the key).
	Identity string       `json:"identity"`
	Limit    sluice.Limit `json:"-"`
	// Spec is the limit as given, for listings and the store.
	Spec Spec `json:"limit"`
	// Reason is free text from whoever set it.
	Reason string `json:"reason,omitempty"`
	// By names the credential that set it (the admin token's source, never the token).
	By string `json:"by,omitempty"`
	// Set is when it was set; Expires when it stops applying (zero: never).
	Set     time.Time `json:"set"`
	Expires time.Time `json:"expires,omitzero"`
}

// Spec is a limit as the admin API and the store write it; a Spec in the store names
// its algorithm.
type Spec = config.LimitSpec

// Pattern reports whether o's identity is a pattern.
func (o Override) Pattern() bool { return strings.HasSuffix(o.Identity, "*") }

// Expired reports whether o no longer applies at now.
func (o Override) Expired(now time.Time) bool { return !o.Expires.IsZero() && !now.Before(o.Expires) }

// Store keeps overrides. Implementations are safe for concurrent use.
type Store interface {
	// Put sets o, replacing the override of the same policy and identity, and returns
	// the one it replaced, if any.
	Put(ctx context.Context, o Override) (prev *Override, err error)
	// Delete removes the override of policy and identity, returning it (nil if none).
	Delete(ctx context.Context, policy, identity string) (*Override, error)
	// Load returns every override, expired ones included, and a version that changes
	// whenever they do.
	Load(ctx context.Context) ([]Override, int64, error)
	// Version is Load's version, read cheaply.
	Version(ctx context.Context) (int64, error)
}

// ErrNotFound is returned for an override that does not exist.
var ErrNotFound = errors.New("override: not found")

// Set is an immutable index of overrides.
type Set struct {
	byKey    map[[2]string]*Override // by policy and identity, patterns included
	patterns map[string][]*Override  // by policy, longest prefix first
	all      []Override
}

// NewSet indexes list, leaving out those expired at now and those whose Spec is not a
// valid limit.
func NewSet(list []Override, now time.Time) *Set {
	s := &Set{byKey: map[[2]string]*Override{}, patterns: map[string][]*Override{}}
	for _, o := range list {
		if o.Limit == (sluice.Limit{}) {
			l, err := o.Spec.Limit(sluice.GCRA)
			if err != nil {
				continue // written by something else: ignored
			}
			o.Limit = l
		}
		if !o.Expired(now) {
			s.all = append(s.all, o)
		}
	}
	slices.SortFunc(s.all, func(a, b Override) int {
		return cmp.Or(strings.Compare(a.Policy, b.Policy), strings.Compare(a.Identity, b.Identity))
	})
	for i := range s.all {
		o := &s.all[i]
		s.byKey[[2]string{o.Policy, o.Identity}] = o
		if o.Pattern() {
			s.patterns[o.Policy] = append(s.patterns[o.Policy], o)
		}
	}
	for _, ps := range s.patterns {
		slices.SortStableFunc(ps, func(a, b *Override) int { return len(b.Identity) - len(a.Identity) })
	}
	return s
}

// Lookup returns the override that applies to id under policy at now: the exact one, else
// the pattern with the longest prefix of id.
func (s *Set) Lookup(policy, id string, now time.Time) (*Override, bool) {
	if s == nil {
		return nil, false
	}
	if o, ok := s.byKey[[2]string{policy, id}]; ok && !o.Pattern() && !o.Expired(now) {
		return o, true
	}
	for _, o := range s.patterns[policy] {
		if strings.HasPrefix(id, strings.TrimSuffix(o.Identity, "*")) && !o.Expired(now) {
			return o, true
		}
	}
	return nil, false
}

// Expired reports whether an override of s has expired by now (it is ignored already;
// a refresh deletes it).
func (s *Set) Expired(now time.Time) bool {
	return s != nil && slices.ContainsFunc(s.all, func(o Override) bool { return o.Expired(now) })
}

// Get returns the override of policy and identity exactly as set.
func (s *Set) Get(policy, identity string, now time.Time) (*Override, bool) {
	if s == nil {
		return nil, false
	}
	o, ok := s.byKey[[2]string{policy, identity}]
	if !ok || o.Expired(now) {
		return nil, false
	}
	return o, true
}

// List returns the overrides in force at now for policy ("" for every policy), sorted by
// policy and identity.
func (s *Set) List(policy string, now time.Time) []Override {
	if s == nil {
		return nil
	}
	out := []Override{}
	for _, o := range s.all {
		if (policy == "" || o.Policy == policy) && !o.Expired(now) {
			out = append(out, o)
		}
	}
	return out
}
