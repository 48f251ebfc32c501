package httplimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/internal/evaluator"
	"github.com/sluicehq/sluice/internal/logattr"
	"github.com/sluicehq/sluice/internal/ratelimitheader"
	"github.com/sluicehq/sluice/internal/span"
	"github.com/sluicehq/sluice/keys"
	"github.com/sluicehq/sluice/overload"
)

// DefaultShed is the default Config.Shed: a 503 problem of type
// ProblemTemporaryReducedCapacity (draft-ietf-httpapi-ratelimit-headers, "Temporary
// Reduced Capacity"). Retry-After is already set.
func DefaultShed(w http.ResponseWriter, r *http.Request, _ *overload.Shed) {
	p := &Problem{
		Type:   ProblemTemporaryReducedCapacity,
		Title:  "Request cannot be satisfied due to temporary server capacity constraints",
		Status: http.StatusServiceUnavailable,
		Detail: "The service is overloaded; retry after " +
			seconds(w.Header().Get(HeaderRetryAfter)) + ".",
	}
	p.ServeHTTP(w, r)
}

// TrustedCriticality returns a Config.Criticality that reads a request's criticality
// from the named header by the rule of Trust in the package doc: only from a request sent
// straight by one of c's trusted proxies, and only a name overload.ParseCriticality
// knows ("critical", "default", "sheddable", and the _plus forms). A header from any other
// peer, and a value it does not know, are ignored (never an error): the policies' and
// routes' criticality applies.
func TrustedCriticality(c *keys.ClientIP, name string,
) func(*http.Request) (overload.Criticality, bool) {
	get := TrustedHeader(c, name)
	return func(r *http.Request) (overload.Criticality, bool) {
		v := get(r)
		if v == "" {
			return overload.Default, false
		}
		return overload.ParseCriticality(v)
	}
}

// criticality is r's criticality by the rule of Config.Criticality: the trusted claim,
// else the highest of the criticalities of the policies whose route r matches (routes[i]
// is the pattern r matches in route set i), else Config.DefaultCriticality.
func (m *Middleware) criticality(r *http.Request, routes []string) overload.Criticality {
	if m.cfg.Criticality != nil {
		if c, ok := m.cfg.Criticality(r); ok {
			return c
		}
	}
	c, set := m.cfg.DefaultCriticality, false
	for i := range m.policies {
		p := &m.policies[i]
		if p.Criticality == nil || (p.Route != "" && p.Route != routes[p.set]) {
			continue
		}
		if !set || *p.Criticality > c {
			c, set = *p.Criticality, true
		}
	}
	return c
}

// admit asks the overload limit for a permit for r. When it sheds r, admit answers it
// (Retry-After, Config.Shed), ends sp, and returns nil.
func (m *Middleware) admit(w http.ResponseWriter, r *http.Request, routes []string,
	sp span.Span) *overload.Permit {
	crit := m.criticality(r, routes)
	p, err := m.cfg.Overload.Acquire(r.Context(), crit)
	if err == nil {
		if m.cfg.OnOverload != nil {
			m.cfg.OnOverload(crit, nil)
		}
		return p
	}
	shed, ok := errors.AsType[*overload.Shed](err)
	if !ok { // Acquire returns no other error; answer one as a shed all the same
		shed = &overload.Shed{Criticality: crit, Reason: overload.ReasonLimit,
			RetryAfter: time.Second}
	}
	if m.cfg.OnOverload != nil {
		m.cfg.OnOverload(crit, shed)
	}
	if l := m.cfg.Logger; l != nil {
		ctx := r.Context()
		if errors.Is(shed, context.Canceled) {
			// The client left while queued; the record is still due.
			ctx = context.WithoutCancel(ctx)
		}
		st := m.cfg.Overload.Stats()
		l.LogAttrs(ctx, slog.LevelWarn, "request shed (overload)",
			slog.String("criticality", shed.Criticality.String()),
			slog.String("reason", shed.Reason),
			slog.Int("limit", st.Limit),
			slog.Int("in_flight", st.InFlight),
			slog.Int("queued", st.Queued),
			logattr.Millis("retry_after_ms", shed.RetryAfter),
			slog.String("method", r.Method),
			slog.String("path", r.URL.Path),
		)
	}
	if sp.On() {
		sp.End(span.KeyPolicy.String(""), evaluator.Outcome{}, shed)
	}
	w.Header().Set(HeaderRetryAfter, fmt.Sprint(max(ratelimitheader.Seconds(shed.RetryAfter), 1)))
	m.cfg.Shed(w, r, shed)
	return nil
}

// serve runs next for r holding permit p (nil: no overload limit): Release when next
// returns, Drop when it panics (its latency says nothing of the service).
func serve(next http.Handler, w http.ResponseWriter, r *http.Request, p *overload.Permit) {
	if p == nil {
		next.ServeHTTP(w, r)
		return
	}
	served := false
	defer func() {
		if served {
			p.Release()
		} else {
			p.Drop()
		}
	}()
	next.ServeHTTP(w, r)
	served = true
}
