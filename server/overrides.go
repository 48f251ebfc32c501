package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/override"
)

// DefaultOverrideRefresh is how often a server looks for override changes made through
// another replica (Options.OverrideRefresh when 0): a change applies everywhere within it.
const DefaultOverrideRefresh = 500 * time.Millisecond

// maxOverrideBody bounds the body of an override request.
const maxOverrideBody = 8 << 10

// OverrideRequest is the body of PUT /v1/overrides/{policy}/{identity}.
// Its limit takes the policy's algorithm when it names none.
type OverrideRequest struct {
	config.LimitSpec
	// ExpiresIn is a Go duration ("2s", "720h"); empty means never.
	ExpiresIn string `json:"expires_in,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// OverrideList is the answer of GET /v1/overrides.
type OverrideList struct {
	Overrides []override.Override `json:"overrides"`
}

// overrideCache is the store's overrides in force, reloaded when their version moves.
type overrideCache struct {
	store  override.Store
	every  time.Duration
	now    func() time.Time
	log    *slog.Logger
	expire func() // counts an override deleted for having expired

	set  atomic.Pointer[override.Set]
	mu   sync.Mutex // serialises refreshes; guards ver
	ver  int64
	last atomic.Int64 // unix ns of the last refresh attempt (maybeRefresh)
	busy atomic.Bool
}

// newOverrideCache returns the cache of store's overrides, loaded once (for at most a
// second) before it returns.
func newOverrideCache(store override.Store, every time.Duration, now func() time.Time, log *slog.Logger, expire func()) *overrideCache {
	if store == nil {
		store = override.NewMemory()
	}
	c := &overrideCache{store: store, every: orPositive(every, DefaultOverrideRefresh), now: now, log: log, expire: expire}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.refresh(ctx, true); err != nil {
		log.Warn("overrides not loaded yet; retrying at the next refresh", slog.String("error", err.Error()))
	}
	return c
}

// lookup returns the override in force for id under policy, if any.
func (c *overrideCache) lookup(policy, id string) (*override.Override, bool) {
	return c.set.Load().Lookup(policy, id, c.now())
}

// refresh reloads the overrides when their version moved, one of them expired, or force,
// and deletes the expired ones from the store.
func (c *overrideCache) refresh(ctx context.Context, force bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last.Store(time.Now().UnixNano())
	v, err := c.store.Version(ctx)
	if err != nil {
		return err
	}
	if cur := c.set.Load(); !force && cur != nil && v == c.ver && !cur.Expired(c.now()) {
		return nil
	}
	list, v, err := c.store.Load(ctx)
	if err != nil {
		return err
	}
	now := c.now()
	for _, o := range list {
		if o.Expired(now) {
			if gone, err := c.store.Delete(ctx, o.Policy, o.Identity); err == nil && gone != nil && gone.Expired(now) {
				c.expire()
				c.log.LogAttrs(ctx, slog.LevelInfo, "override expired", slog.String("policy", o.Policy),
					slog.String("identity", o.Identity), slog.Time("expires", o.Expires))
			}
		}
	}
	c.ver = v
	c.set.Store(override.NewSet(list, now))
	return nil
}

// loop refreshes every c.every until ctx ends.
func (c *overrideCache) loop(ctx context.Context) {
	t := time.NewTicker(c.every)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, c.every)
		err := c.refresh(rctx, false)
		cancel()
		if err != nil && !failing && ctx.Err() == nil {
			c.log.Warn("overrides not refreshed; the last ones loaded stay in force", slog.String("error", err.Error()))
		}
		failing = err != nil
	}
}

// maybeRefresh starts a refresh in the background when the last is older than c.every
// (the proxy refreshes as requests come).
func (c *overrideCache) maybeRefresh() {
	if time.Since(time.Unix(0, c.last.Load())) < c.every || !c.busy.CompareAndSwap(false, true) {
		return
	}
	c.last.Store(time.Now().UnixNano())
	go func() {
		defer c.busy.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), c.every)
		defer cancel()
		if err := c.refresh(ctx, false); err != nil {
			c.log.Warn("overrides not refreshed; the last ones loaded stay in force", slog.String("error", err.Error()))
		}
	}()
}

// overrideIdentity reads the identity of an override request for policy p
// (config.Policy.ParseIdentity, with patterns; raw API keys are hashed at once).
func (s *Server) overrideIdentity(cfg *config.Config, p *config.Policy, raw string) (string, error) {
	var hashErr error // the server's, not the request's
	id, err := p.ParseIdentity(raw, config.IdentityForm{
		Patterns: true,
		HashKey: func(key string) (string, error) {
			h, err := s.hashers.get(cfg)
			if err != nil {
				hashErr = err
				return "", err
			}
			return h.Identity(key).ID, nil
		},
		ClientIP: clientIP(&cfg.Identity),
	})
	switch {
	case hashErr != nil:
		return "", hashErr
	case err != nil:
		return "", badRequest("identity: %v", err)
	}
	return id, nil
}

// tokenName names the admin credential in logs: the source of the token, never the token.
func (s *Server) tokenName() string {
	if s.customToken {
		return "admin token (Options.AdminToken)"
	}
	a := s.config().Admin
	switch {
	case a.TokenEnv != "":
		return "admin token $" + a.TokenEnv
	case a.TokenFile != "":
		return "admin token file " + a.TokenFile
	}
	return "admin token $SLUICE_ADMIN_TOKEN"
}

// adminAPI serves an admin endpoint with serve, answering its error with writeError.
func (s *Server) adminAPI(serve func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return s.admin(func(w http.ResponseWriter, r *http.Request) {
		if err := serve(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// overridePolicy reads the policy and identity an override request's path names.
func (s *Server) overridePolicy(r *http.Request) (*config.Policy, string, error) {
	cfg := s.config()
	name := r.PathValue("policy")
	p, ok := cfg.Policy(name)
	if !ok {
		return nil, "", badRequest("policy: %s", unknownName(cfg, "policy", name).msg)
	}
	id, err := s.overrideIdentity(cfg, p, r.PathValue("identity"))
	return p, id, err
}

func (s *Server) handleOverridePut(w http.ResponseWriter, r *http.Request) error {
	p, id, err := s.overridePolicy(r)
	if err != nil {
		return err
	}
	var req OverrideRequest
	if err := decodeBody(w, r, maxOverrideBody, &req, ""); err != nil {
		return err
	}
	o, err := overrideOf(p, id, &req, s.now())
	if err != nil {
		return err
	}
	o.By = s.tokenName()
	prev, err := s.ovr.store.Put(r.Context(), o)
	if err != nil {
		return err
	}
	s.changed(r.Context(), "set", prev, &o)
	writeJSON(w, http.StatusOK, o)
	return nil
}

// overrideOf checks an override request for policy p; the error names the field.
func overrideOf(p *config.Policy, id string, req *OverrideRequest, now time.Time) (override.Override, error) {
	def, _ := p.LimitFor("", "")
	l, err := req.LimitSpec.Limit(def.Algorithm)
	if err != nil {
		var fe *config.FieldError
		if errors.As(err, &fe) {
			err = fe // the first field at fault
		}
		return override.Override{}, badRequest("%v", err)
	}
	spec := req.LimitSpec
	spec.Algorithm = l.Algorithm.String()
	o := override.Override{Policy: p.Name, Identity: id, Limit: l, Spec: spec, Reason: req.Reason, Set: now.UTC()}
	if req.ExpiresIn != "" {
		d, err := time.ParseDuration(req.ExpiresIn)
		if err != nil || d <= 0 {
			return override.Override{}, badRequest("expires_in: want a positive duration such as 2s or 720h, got %q", req.ExpiresIn)
		}
		o.Expires = now.Add(d).UTC()
	}
	return o, nil
}

func (s *Server) handleOverrideGet(w http.ResponseWriter, r *http.Request) error {
	p, id, err := s.overridePolicy(r)
	if err != nil {
		return err
	}
	if err := s.ovr.refresh(r.Context(), false); err != nil {
		return err
	}
	o, ok := s.ovr.set.Load().Get(p.Name, id, s.now())
	if !ok {
		return &apiError{http.StatusNotFound, fmt.Sprintf("no override of policy %q for %q", p.Name, id)}
	}
	writeJSON(w, http.StatusOK, o)
	return nil
}

func (s *Server) handleOverrideList(w http.ResponseWriter, r *http.Request) error {
	policy := r.URL.Query().Get("policy")
	if cfg := s.config(); policy != "" {
		if _, ok := cfg.Policy(policy); !ok {
			return badRequest("policy: %s", unknownName(cfg, "policy", policy).msg)
		}
	}
	if err := s.ovr.refresh(r.Context(), false); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, OverrideList{Overrides: s.ovr.set.Load().List(policy, s.now())})
	return nil
}

func (s *Server) handleOverrideDelete(w http.ResponseWriter, r *http.Request) error {
	p, id, err := s.overridePolicy(r)
	if err != nil {
		return err
	}
	prev, err := s.ovr.store.Delete(r.Context(), p.Name, id)
	if err != nil {
		return err
	}
	if prev == nil {
		return &apiError{http.StatusNotFound, fmt.Sprintf("no override of policy %q for %q", p.Name, id)}
	}
	s.changed(r.Context(), "delete", prev, nil)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// changed reloads the overrides after a change through the API (action "set" or
// "delete"), counts it, and logs it: who, what, before and after, and why.
func (s *Server) changed(ctx context.Context, action string, before, after *override.Override) {
	_ = s.ovr.refresh(ctx, true)
	s.metrics.overrideChanges.WithLabelValues(action).Inc()
	msg, o := "override set", after
	if after == nil {
		msg, o = "override removed", before
	}
	lim := func(o *override.Override) string {
		if o == nil {
			return "none"
		}
		str := o.Limit.String()
		if o.Limit == (sluice.Limit{}) {
			if l, err := o.Spec.Limit(sluice.GCRA); err == nil {
				str = l.String()
			}
		}
		if !o.Expires.IsZero() {
			str += " until " + o.Expires.Format(time.RFC3339)
		}
		return str
	}
	s.log.LogAttrs(ctx, slog.LevelInfo, msg,
		slog.String("policy", o.Policy), slog.String("identity", o.Identity), slog.String("by", s.tokenName()),
		slog.String("before", lim(before)), slog.String("after", lim(after)), slog.String("reason", o.Reason))
}

// appendOverrides adds the overrides in force to a configuration dump, as "api_overrides".
func appendOverrides(dump []byte, list []override.Override) []byte {
	dump = bytes.TrimRight(dump, " \n")
	body, ok := bytes.CutSuffix(dump, []byte("}"))
	b, err := json.MarshalIndent(list, "  ", "  ")
	if !ok || err != nil {
		return dump
	}
	out := bytes.TrimRight(slices.Clone(body), " \n")
	if len(out) > 1 {
		out = append(out, ',')
	}
	return fmt.Appendf(out, "\n  \"api_overrides\": %s\n}\n", b)
}
