package observe

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/denycache"
	"github.com/sluicehq/sluice/failover"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/poll"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/memory"
	"github.com/sluicehq/sluice/redisstore"
	"github.com/sluicehq/sluice/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// rawKey is an API key that must never reach the log.
const rawKey = "sk_live_7Hq2vT9xLm4Rp8Zc"

// logBuffer is a JSON slog handler's output, safe for concurrent writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// events returns the logged events, one map per line.
func (b *logBuffer) events(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var ev map[string]any
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}

func newLogger() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

// decide decides one request with l: AllowN with the request's Policy, Shadow and Failure.
func decide(ctx context.Context, l sluice.Limiter, r sluice.Request) (sluice.Decision, error) {
	var ds [1]sluice.Decision
	_, err := l.Decide(ctx, []sluice.Request{r}, ds[:])
	return ds[0], err
}

// redisStack is observe(failover(redisstore)) on a real server, with a memory store as
// the failover's local limiter (FailLocal).
type redisStack struct {
	srv   *redistest.Server
	store *redisstore.Store
	fo    *failover.Limiter
}

func newRedisStack(t *testing.T, opts ...failover.Option) *redisStack {
	t.Helper()
	srv := redistest.Start(t)
	// An hour-long fixed window the test counts in must not end during it: the store's
	// clock runs in real time from the middle of an hour.
	backend, err := redisstore.Open(srv.URL(), redisstore.WithClock(clocktest.Running(clocktest.MidHour)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { backend.Close() })
	local := memory.New()
	t.Cleanup(func() { local.Close() })
	// A deadline a healthy store meets on a busy machine under the race detector.
	fo := failover.New(backend, append([]failover.Option{failover.WithDeadline(time.Second), failover.WithLocalLimiter(local)}, opts...)...)
	t.Cleanup(func() { fo.Close() })
	return &redisStack{srv: srv, store: backend, fo: fo}
}

// TestDeniedDecisionLog: the log of a denial says what the limiter saw, enough to answer
// a customer who disputes a 429.
func TestDeniedDecisionLog(t *testing.T) {
	st := newRedisStack(t)
	logger, buf := newLogger()
	lim := New(st.fo, WithLogger(logger), WithSampling(0))
	ctx := context.Background()
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}
	for i := 0; i < 4; i++ {
		d, err := decide(ctx, lim, sluice.Request{Key: rawKey, Limit: limit, N: 1, Policy: "per-api-key"})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != (i < 3) {
			t.Fatalf("call %d: allowed %v", i, d.Allowed)
		}
	}
	evs := buf.events(t)
	if len(evs) != 1 {
		t.Fatalf("%d events with sampling 0, want only the denial:\n%s", len(evs), buf.String())
	}
	ev := evs[0]
	want := map[string]any{
		"msg":       "rate limit decision",
		"level":     "INFO",
		"policy":    "per-api-key",
		"key":       HashKey(rawKey),
		"algorithm": "fixed_window",
		"limit":     3.0,
		"period_ms": float64(time.Hour / time.Millisecond),
		"cost":      1.0,
		"allowed":   false,
		"remaining": 0.0,
		"used":      3.0, // the window's count the store saw
		"path":      "store",
		"breaker":   "closed",
	}
	for k, v := range want {
		if ev[k] != v {
			t.Errorf("%s = %v (%T), want %v", k, ev[k], ev[k], v)
		}
	}
	if ra, _ := ev["retry_after_ms"].(float64); ra <= 0 || ra > float64(time.Hour/time.Millisecond) {
		t.Errorf("retry_after_ms %v, want the time to the next window", ev["retry_after_ms"])
	}
	if ev["reset_after_ms"] != ev["retry_after_ms"] {
		t.Errorf("reset_after_ms %v, retry_after_ms %v: a full fixed window resets when it retries", ev["reset_after_ms"], ev["retry_after_ms"])
	}
	if _, ok := ev["store_latency_us"].(float64); !ok {
		t.Errorf("store_latency_us %v", ev["store_latency_us"])
	}
	// Every duration names its unit: none is a bare count of nanoseconds.
	for _, k := range []string{"store_latency", "latency", "retry_after", "reset_after", "period"} {
		if v, ok := ev[k]; ok {
			t.Errorf("%s=%v: a duration without its unit", k, v)
		}
	}
	for _, k := range []string{"error", "error_kind", "mode", "shadow"} {
		if _, ok := ev[k]; ok {
			t.Errorf("unexpected %s=%v in a store decision", k, ev[k])
		}
	}
}

// leakyStore reports errors that quote the key, as a careless store might. It classifies
// them, as every store does (sluice.StoreError).
type leakyStore struct{ sluice.Limiter }

func (s leakyStore) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	key := reqs[0].Key
	err := fmt.Errorf("store: cannot decide %q (%s): %w", key, key, errors.New("READONLY You can't write against a read only replica."))
	return sluice.Report{StoreCalled: true}, &sluice.StoreError{Kind: store.KindReadOnly, Err: err}
}

// singles decides one limit at a time with its Limiter and cannot decide several at once
// atomically, as a store without a batch operation.
type singles struct{ sluice.Limiter }

func (s singles) Decide(ctx context.Context, reqs []sluice.Request, ds []sluice.Decision) (sluice.Report, error) {
	if len(reqs) > 1 {
		return sluice.Report{Kind: store.KindBadInput}, fmt.Errorf("singles: %w", sluice.ErrInvalidKey)
	}
	return s.Limiter.Decide(ctx, reqs, ds)
}

// TestRawKeyNeverLogged drives every kind of event (sampled allowed, denied, bad input,
// store failure absorbed by each mode, an error message quoting the key, reset) and
// checks that the raw key appears nowhere in the output, and its hash does.
func TestRawKeyNeverLogged(t *testing.T) {
	st := newRedisStack(t, failover.WithBreaker(failover.Breaker{FailingFor: -1, OpenFor: time.Hour}))
	logger, buf := newLogger()
	lim := New(st.fo, WithLogger(logger), WithSampling(1))
	ctx := context.Background()
	limit := sluice.PerMinute(2)
	for i := 0; i < 3; i++ { // allowed, allowed, denied
		if _, err := lim.AllowN(ctx, rawKey, limit, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := lim.AllowN(ctx, rawKey, limit, 5); !store.IsBadInput(err) { // cost above the burst
		t.Fatalf("bad input: %v", err)
	}
	if err := lim.Reset(ctx, rawKey, limit); err != nil {
		t.Fatal(err)
	}
	st.srv.Kill()
	for _, m := range []sluice.FailureMode{sluice.FailOpen, sluice.FailClosed, sluice.FailLocal} {
		for i := 0; i < 7; i++ { // the breaker opens on the way
			decide(ctx, lim, sluice.Request{Key: rawKey, Limit: limit, N: 1, Failure: sluice.Failure{Mode: m}})
		}
	}
	mem := memory.New()
	defer mem.Close()
	leaky := New(leakyStore{mem}, WithLogger(logger))
	if _, err := leaky.AllowN(ctx, rawKey, limit, 1); err == nil {
		t.Fatal("leaky store did not fail")
	}

	out := buf.String()
	if strings.Contains(out, rawKey) {
		t.Fatalf("the raw key appears in the log:\n%s", out)
	}
	if q := fmt.Sprintf("%q", rawKey); strings.Contains(out, q[1:len(q)-1]) {
		t.Fatalf("the quoted raw key appears in the log")
	}
	evs := buf.events(t)
	seen := map[string]bool{}
	for _, ev := range evs {
		if ev["key"] != HashKey(rawKey) {
			t.Errorf("event with key %v, want the hash %s", ev["key"], HashKey(rawKey))
		}
		path, _ := ev["path"].(string)
		kind, _ := ev["error_kind"].(string)
		if kind == "reset" || kind == "timeout" {
			kind = "refused" // however the client first noticed the dead server
		}
		seen[fmt.Sprint(ev["msg"], "/", path, "/", ev["allowed"], "/", kind)] = true
	}
	for _, want := range []string{
		"rate limit decision/store/true/", "rate limit decision/store/false/",
		"rate limit decision/store/false/bad_input",
		"rate limit decision/open/true/refused", "rate limit decision/closed/false/breaker_open",
		"rate limit decision/local/true/breaker_open", "rate limit decision/store/false/readonly",
		"rate limit reset//<nil>/",
	} {
		if !seen[want] {
			t.Errorf("no event %s; saw %v", want, seen)
		}
	}
}

func TestSampling(t *testing.T) {
	backend := memory.New()
	defer backend.Close()
	logger, buf := newLogger()
	lim := New(backend, WithLogger(logger), WithSampling(0.25))
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		lim.AllowN(ctx, fmt.Sprint("k", i), sluice.PerMinute(10), 1)
	}
	for i := 0; i < 5; i++ {
		lim.AllowN(ctx, "hot", sluice.PerMinute(1), 1) // 1 allowed, 4 denied
	}
	allowed, denied := 0, 0
	for _, ev := range buf.events(t) {
		if ev["allowed"] == true {
			allowed++
		} else {
			denied++
		}
	}
	if allowed != 25 && allowed != 26 {
		t.Errorf("%d of 101 allowed decisions logged at 0.25, want 25 or 26", allowed)
	}
	if denied != 4 {
		t.Errorf("%d denials logged, want all 4", denied)
	}
}

// metricValue returns the value of the series of name with exactly labels, or -1.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return -1
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, l := range m.GetLabel() {
		if want[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}

func TestMetrics(t *testing.T) {
	st := newRedisStack(t, failover.WithBreaker(failover.Breaker{FailingFor: -1, OpenFor: 200 * time.Millisecond, Probes: 1}))
	reg := prometheus.NewRegistry()
	logger, _ := newLogger()
	m, err := NewMetrics(reg, WithEvictedKeys(st.store.EvictedKeys, time.Hour), WithMetricsLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering the metrics twice on one registry succeeded")
	}
	lim := New(st.fo, WithMetrics(m), WithLogger(nil))
	ctx := context.Background()
	limit := sluice.PerMinute(2)
	api := func(key string, limit sluice.Limit, n int64) sluice.Request {
		return sluice.Request{Key: key, Limit: limit, N: n, Policy: "api"}
	}
	for i := 0; i < 3; i++ {
		decide(ctx, lim, api("user:1", limit, 1))
	}
	decide(ctx, lim, api("user:1", limit, 9)) // bad input

	val := func(name string, labels map[string]string) float64 { return metricValue(t, reg, name, labels) }
	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_decisions_total", map[string]string{"policy": "api", "result": "allowed", "path": "store"}, 2},
		{"sluice_decisions_total", map[string]string{"policy": "api", "result": "denied", "path": "store"}, 1},
		{"sluice_decisions_total", map[string]string{"policy": "api", "result": "error", "path": "store"}, 1},
		{"sluice_store_latency_seconds", map[string]string{"policy": "api"}, 3}, // bad input never reaches the store
		{"sluice_breaker_state", map[string]string{"state": "closed"}, 1},
		{"sluice_breaker_state", map[string]string{"state": "open"}, 0},
	}
	for _, c := range checks {
		if got := val(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}

	// The store dies: failures by kind, fallbacks by mode, the breaker opens.
	st.srv.Kill()
	for i := 0; i < 8; i++ {
		r := api(fmt.Sprint("user:", i), limit, 1)
		r.Failure = sluice.Failure{Mode: sluice.FailLocal}
		decide(ctx, lim, r)
	}
	if got := val("sluice_breaker_state", map[string]string{"state": "open"}); got != 1 {
		t.Errorf("breaker open gauge %v after the store died", got)
	}
	if got := val("sluice_store_errors_total", map[string]string{"kind": "refused"}); got < 1 {
		t.Errorf("refused errors %v", got)
	}
	if got := val("sluice_store_errors_total", map[string]string{"kind": "breaker_open"}); got < 1 {
		t.Errorf("breaker_open errors %v", got)
	}
	if got := val("sluice_fallback_decisions_total", map[string]string{"policy": "api", "mode": "local", "result": "allowed"}); got != 8 {
		t.Errorf("local fallback decisions %v, want 8", got)
	}
	if got := val("sluice_decisions_total", map[string]string{"policy": "api", "result": "allowed", "path": "local"}); got != 8 {
		t.Errorf("local decisions %v, want 8", got)
	}

	// It comes back: the breaker closes, the gauge follows.
	st.srv.Restart()
	poll.UntilDescribed(t, 10*time.Second, "the breaker closed and its gauge following", func() bool {
		if st.fo.State() == store.BreakerClosed && val("sluice_breaker_state", map[string]string{"state": "closed"}) == 1 {
			return true
		}
		decide(ctx, lim, api("user:probe", sluice.PerSecond(100), 1))
		return false
	}, func() string { return fmt.Sprint("breaker ", st.fo.State()) })

	// Evictions: the first poll is the baseline, growth is counted. (A connection from
	// before the restart may fail the first poll, as it would fail one background poll.)
	var pollErr error
	poll.UntilDescribed(t, 10*time.Second, "a poll of the evicted keys", func() bool {
		pollErr = m.PollEvictedKeys(ctx)
		return pollErr == nil
	}, func() string { return fmt.Sprint(pollErr) })
	if got := val("sluice_redis_evicted_keys_poll_errors_total", nil); got < 0 {
		t.Errorf("poll errors metric missing")
	}
	if got := val("sluice_redis_evicted_keys_total", nil); got != 0 {
		t.Errorf("evicted keys %v after the baseline poll", got)
	}
	st.srv.MustDo("CONFIG", "SET", "maxmemory-policy", "allkeys-random")
	st.srv.MustDo("DEBUG", "POPULATE", "20000", "filler", "64")
	st.srv.MustDo("CONFIG", "SET", "maxmemory", "2mb")
	st.srv.Do("SET", "trigger", "eviction") // evictions run before a command
	if err := m.PollEvictedKeys(ctx); err != nil {
		t.Fatal(err)
	}
	evicted, err := st.srv.Info("evicted_keys")
	if err != nil {
		t.Fatal(err)
	}
	// Redis goes on evicting in the background after the poll: the metric is at most
	// what the server says a moment later.
	if got := val("sluice_redis_evicted_keys_total", nil); got <= 0 || got > mustFloat(t, evicted) {
		t.Errorf("evicted keys metric %v, server says %s", got, evicted)
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	if _, err := fmt.Sscan(s, &f); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return f
}

func TestEvictedKeysPoller(t *testing.T) {
	var mu sync.Mutex
	values := []int64{100, 100, 130, 5} // a restart in between
	polls := 0
	f := func(ctx context.Context) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		if polls >= len(values) {
			return values[len(values)-1], nil
		}
		v := values[polls]
		polls++
		return v, nil
	}
	reg := prometheus.NewRegistry()
	logger, buf := newLogger()
	m, err := NewMetrics(reg, WithEvictedKeys(f, 5*time.Millisecond), WithMetricsLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	poll.UntilDescribed(t, 5*time.Second, "evicted keys 30 + 5", func() bool {
		return metricValue(t, reg, "sluice_redis_evicted_keys_total", nil) == 35
	}, func() string { return fmt.Sprint(metricValue(t, reg, "sluice_redis_evicted_keys_total", nil)) })
	m.Close()
	if !strings.Contains(buf.String(), "evicted") || !strings.Contains(buf.String(), `"level":"WARN"`) {
		t.Errorf("no eviction warning logged:\n%s", buf.String())
	}
}

func TestAllowMultiLogsEachRequest(t *testing.T) {
	backend := memory.New()
	defer backend.Close()
	logger, buf := newLogger()
	lim := New(backend, WithLogger(logger), WithSampling(1), WithDefaultPolicy("fallback"))
	reqs := []sluice.Request{
		{Key: rawKey, Limit: sluice.PerMinute(1), N: 1, Policy: "per-minute"},
		{Key: rawKey, Limit: sluice.PerHour(10), N: 1}, // no Policy: the default
	}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := sluice.AllowMulti(ctx, lim, reqs); err != nil {
			t.Fatal(err)
		}
	}
	evs := buf.events(t)
	if len(evs) != 4 {
		t.Fatalf("%d events for 2 batches of 2, want 4", len(evs))
	}
	if evs[0]["policy"] != "per-minute" || evs[1]["policy"] != "fallback" {
		t.Errorf("batch policies %v, %v", evs[0]["policy"], evs[1]["policy"])
	}
	if evs[2]["allowed"] != false || evs[3]["allowed"] != false || evs[3]["used"] != 1.0 || evs[2]["batch_size"] != 2.0 {
		t.Errorf("denied batch events: %v", evs[2:])
	}
	// A limiter that cannot decide a batch atomically says so, and observe passes its
	// error on, logged (with its kind) for each request.
	logger, buf = newLogger()
	if _, err := sluice.AllowMulti(ctx, New(singles{backend}, WithLogger(logger)), reqs); !errors.Is(err, sluice.ErrInvalidKey) {
		t.Errorf("AllowMulti over a limiter without batches: %v, want the store's error", err)
	}
	evs = buf.events(t)
	if len(evs) != 2 || evs[0]["error_kind"] != "bad_input" || evs[1]["error_kind"] != "bad_input" || evs[0]["level"] != "WARN" {
		t.Errorf("a batch the limiter refused: %v", evs)
	}
}

// valueSpy is a context that records every value looked up in it.
type valueSpy struct {
	context.Context
	mu   sync.Mutex
	keys []any
}

func (c *valueSpy) Value(key any) any {
	c.mu.Lock()
	c.keys = append(c.keys, key)
	c.mu.Unlock()
	return c.Context.Value(key)
}

// downStore fails every call, classified as refused.
type downStore struct{}

var errDown = &sluice.StoreError{Kind: store.KindRefused, Err: errors.New("connect: connection refused")}

func (downStore) Decide(context.Context, []sluice.Request, []sluice.Decision) (sluice.Report, error) {
	return sluice.Report{StoreCalled: true}, errDown
}
func (downStore) Reserve(context.Context, string, sluice.Limit, int64) (sluice.Reservation, error) {
	return sluice.Reservation{}, errDown
}
func (downStore) Reset(context.Context, string, sluice.Limit) error { return errDown }
func (downStore) Settle(context.Context, string, sluice.Limit, sluice.ReservationID, int64) (sluice.Decision, error) {
	return sluice.Decision{}, errDown
}

func (downStore) Release(context.Context, string, sluice.Limit, sluice.LeaseID) (bool, error) {
	return false, errDown
}

// TestRequestPolicyAndShadow: each request's Policy names its decisions in the log and
// the metrics, its Shadow flag is logged, and no context value takes part (none is
// looked up). Requests without a Policy take WithDefaultPolicy's. Through a failover
// whose store is down, a shadow limit fails open even when its Failure says closed, and
// the metrics count it so under its policy.
func TestRequestPolicyAndShadow(t *testing.T) {
	backend := memory.New()
	defer backend.Close()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	logger, buf := newLogger()
	lim := New(backend, WithLogger(logger), WithMetrics(m), WithSampling(1), WithDefaultPolicy("unnamed"))
	ctx := &valueSpy{Context: context.Background()}

	batch := []sluice.Request{
		{Key: "user:1", Limit: sluice.PerMinute(1), N: 1, Policy: "per-user"},
		{Key: "user:1", Limit: sluice.PerHour(100), N: 1, Policy: "per-user-shadow", Shadow: true},
		{Key: "ip:1", Limit: sluice.PerMinute(5), N: 1},
	}
	ds := make([]sluice.Decision, len(batch))
	for call := range 2 {
		if _, err := lim.Decide(ctx, batch, ds); err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			if d.Allowed != (call == 0) {
				t.Fatalf("call %d, request %d: %+v", call, i, d)
			}
		}
	}
	if _, err := lim.Decide(ctx, []sluice.Request{{Key: "user:3", Limit: sluice.PerMinute(1), N: 1, Policy: "solo", Shadow: true}}, ds); err != nil || !ds[0].Allowed {
		t.Fatalf("a shadow request alone: %+v, %v", ds[0], err)
	}
	ctx.mu.Lock()
	if len(ctx.keys) != 0 {
		t.Errorf("context values looked up: %v", ctx.keys)
	}
	ctx.mu.Unlock()

	evs := buf.events(t)
	if len(evs) != 7 {
		t.Fatalf("%d events for 2 calls of 3 requests and 1 of 1, want 7:\n%s", len(evs), buf.String())
	}
	policies := []string{"per-user", "per-user-shadow", "unnamed"}
	for j, ev := range evs[:6] {
		i := j % 3
		if ev["policy"] != policies[i] || ev["allowed"] != (j < 3) || ev["batch"] != float64(i) || ev["batch_size"] != 3.0 {
			t.Errorf("event %d: %v, want policy %s, batch %d of 3", j, ev, policies[i], i)
		}
		if shadow, ok := ev["shadow"]; batch[i].Shadow != ok || ok && shadow != true {
			t.Errorf("event %d (policy %s): shadow=%v (present %v), want present only for the shadow limit, true", j, ev["policy"], shadow, ok)
		}
	}
	solo := evs[6]
	if solo["policy"] != "solo" || solo["shadow"] != true || solo["allowed"] != true {
		t.Errorf("the shadow request alone: %v", solo)
	}
	for _, k := range []string{"batch", "batch_size"} {
		if _, ok := solo[k]; ok {
			t.Errorf("unexpected %s=%v for a request alone", k, solo[k])
		}
	}

	val := func(name string, labels map[string]string) float64 { return metricValue(t, reg, name, labels) }
	for _, p := range policies {
		for _, result := range []string{"allowed", "denied"} {
			if got := val("sluice_decisions_total", map[string]string{"policy": p, "result": result, "path": "store"}); got != 1 {
				t.Errorf("decisions{policy=%s, result=%s} = %v, want 1", p, result, got)
			}
		}
		if got := val("sluice_store_latency_seconds", map[string]string{"policy": p}); got != 2 {
			t.Errorf("store latency observations of %s: %v, want 2", p, got)
		}
	}
	if got := val("sluice_decisions_total", map[string]string{"policy": "solo", "result": "allowed", "path": "store"}); got != 1 {
		t.Errorf("decisions{policy=solo} = %v, want 1", got)
	}
	if got := val("sluice_decisions_total", map[string]string{"policy": DefaultPolicy, "result": "allowed", "path": "store"}); got != -1 {
		t.Errorf("decisions{policy=%s} = %v: a request fell back on DefaultPolicy over WithDefaultPolicy", DefaultPolicy, got)
	}

	// The store is down, every limit asks to fail closed: the enforced one does, the
	// shadow one fails open.
	fo := failover.New(downStore{}, failover.WithDeadline(time.Second))
	defer fo.Close()
	logger, buf = newLogger()
	flim := New(fo, WithLogger(logger), WithMetrics(m), WithSampling(1))
	closed := sluice.Failure{Mode: sluice.FailClosed}
	d, err := decide(context.Background(), flim, sluice.Request{Key: "user:4", Limit: sluice.PerMinute(1), N: 1, Policy: "enforced", Failure: closed})
	if !errors.Is(err, sluice.ErrStoreUnavailable) || d.Allowed || d.Path != sluice.PathClosed {
		t.Fatalf("an enforced limit failing closed: %+v, %v", d, err)
	}
	d, err = decide(context.Background(), flim, sluice.Request{Key: "user:4", Limit: sluice.PerMinute(1), N: 1, Policy: "trial", Shadow: true, Failure: closed})
	if err != nil || !d.Allowed || d.Path != sluice.PathOpen {
		t.Fatalf("a shadow limit with the store down: %+v, %v; want it failed open", d, err)
	}
	evs = buf.events(t)
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2:\n%s", len(evs), buf.String())
	}
	if ev := evs[0]; ev["policy"] != "enforced" || ev["mode"] != "closed" || ev["path"] != "closed" || ev["shadow"] != nil || ev["error_kind"] != "refused" {
		t.Errorf("the enforced limit's event: %v", ev)
	}
	if ev := evs[1]; ev["policy"] != "trial" || ev["mode"] != "open" || ev["path"] != "open" || ev["shadow"] != true || ev["error_kind"] != "refused" || ev["level"] != "WARN" {
		t.Errorf("the shadow limit's event: %v", ev)
	}
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"policy": "enforced", "mode": "closed", "result": "error"}, 1},
		{map[string]string{"policy": "trial", "mode": "open", "result": "allowed"}, 1},
		{map[string]string{"policy": "trial", "mode": "closed", "result": "error"}, -1},
	} {
		if got := val("sluice_fallback_decisions_total", c.labels); got != c.want {
			t.Errorf("sluice_fallback_decisions_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if got := val("sluice_store_errors_total", map[string]string{"kind": "refused"}); got != 2 {
		t.Errorf("refused store errors %v, want 2", got)
	}
}

// TestErrorLogsNoStaleDecision: a caller reusing its decisions slice, whose next call
// the inner limiter refuses without writing a decision (bad input), gets, and has logged
// and counted, no decision of the earlier call.
func TestErrorLogsNoStaleDecision(t *testing.T) {
	backend := memory.New()
	defer backend.Close()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	logger, buf := newLogger()
	lim := New(backend, WithLogger(logger), WithMetrics(m), WithSampling(1))
	ctx := context.Background()
	limit := sluice.PerMinute(2)
	ds := make([]sluice.Decision, 1)
	if _, err := lim.Decide(ctx, []sluice.Request{{Key: rawKey, Limit: limit, N: 1, Policy: "api"}}, ds); err != nil || !ds[0].Allowed {
		t.Fatalf("first call: %+v, %v", ds[0], err)
	}
	ds[0].Path = sluice.PathLocal // as a failure mode's decision would have it
	if _, err := lim.Decide(ctx, []sluice.Request{{Key: rawKey, Limit: limit, N: 3, Policy: "api"}}, ds); !store.IsBadInput(err) {
		t.Fatalf("cost above the burst: %v", err)
	}
	if ds[0] != (sluice.Decision{}) {
		t.Errorf("decision after bad input: %+v, want none", ds[0])
	}
	evs := buf.events(t)
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2:\n%s", len(evs), buf.String())
	}
	ev := evs[1]
	if ev["allowed"] != false || ev["remaining"] != 0.0 || ev["path"] != "store" || ev["error_kind"] != "bad_input" || ev["limit"] != 2.0 {
		t.Errorf("bad input logged as %v", ev)
	}
	if _, ok := ev["mode"]; ok {
		t.Errorf("bad input logged with a failure mode: %v", ev)
	}
	if got := metricValue(t, reg, "sluice_decisions_total", map[string]string{"policy": "api", "result": "error", "path": "store"}); got != 1 {
		t.Errorf("bad input counted %v times on path backend, want 1", got)
	}
	if strings.Contains(gatherText(t, reg), "sluice_fallback_decisions_total") {
		t.Error("bad input counted as a fallback decision")
	}
}

// TestCachedDenials: observe(denycache(failover(redisstore))), the chain sluice serve
// builds for Redis. A denial the cache answers is counted as a denial on path "cache"
// without a store latency or a failure mode, sampled for the log like an allowed decision
// and logged at Info, and Redis never sees it.
func TestCachedDenials(t *testing.T) {
	srv := redistest.Start(t)
	backend, err := redisstore.Open(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	fo := failover.New(backend, failover.WithDeadline(time.Second),
		failover.WithBreaker(failover.Breaker{FailingFor: -1, OpenFor: time.Hour}))
	defer fo.Close()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	logger, buf := newLogger()
	dc := denycache.New(fo)
	lim := New(dc, WithMetrics(m), WithLogger(logger), WithSampling(0))
	ctx := context.Background()
	limit := sluice.Limit{Algorithm: sluice.FixedWindow, Rate: 3, Period: time.Hour}
	req := sluice.Request{Key: rawKey, Limit: limit, N: 1, Policy: "api"}
	for i := range 3 {
		if d, err := decide(ctx, lim, req); err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
	}
	if d, err := decide(ctx, lim, req); err != nil || d.Allowed || d.Path != sluice.PathStore {
		t.Fatalf("the first denial: %+v, %v", d, err)
	}
	calls, _ := srv.ScriptStats()
	for range 10 {
		if d, err := decide(ctx, lim, req); err != nil || d.Allowed || d.Path != sluice.PathCache || d.RetryAfter <= 0 {
			t.Fatalf("a repeated denial: %+v, %v", d, err)
		}
	}
	if got, _ := srv.ScriptStats(); got != calls {
		t.Errorf("Redis ran %d scripts for 10 cached denials", got-calls)
	}

	val := func(name string, labels map[string]string) float64 { return metricValue(t, reg, name, labels) }
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"sluice_decisions_total", map[string]string{"policy": "api", "result": "allowed", "path": "store"}, 3},
		{"sluice_decisions_total", map[string]string{"policy": "api", "result": "denied", "path": "store"}, 1},
		{"sluice_decisions_total", map[string]string{"policy": "api", "result": "denied", "path": "cache"}, 10},
		{"sluice_store_latency_seconds", map[string]string{"policy": "api"}, 4},
	} {
		if got := val(c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if strings.Contains(gatherText(t, reg), "sluice_fallback_decisions_total") {
		t.Error("cached denials counted as fallback decisions")
	}

	// With sampling 0 the store's denial is logged, and its repeats are not.
	evs := buf.events(t)
	if len(evs) != 1 || evs[0]["path"] != "store" || evs[0]["allowed"] != false {
		t.Fatalf("%d events, want only the store's denial:\n%s", len(evs), buf.String())
	}
	// Sampled in, a repeat is logged at Info like the store's denial.
	logger, buf = newLogger()
	if d, err := decide(ctx, New(dc, WithLogger(logger), WithSampling(1)), req); err != nil || d.Path != sluice.PathCache {
		t.Fatalf("a repeated denial: %+v, %v", d, err)
	}
	evs = buf.events(t)
	if len(evs) != 1 {
		t.Fatalf("%d events with sampling 1, want 1:\n%s", len(evs), buf.String())
	}
	ev := evs[0]
	if ev["level"] != "INFO" || ev["path"] != "cache" || ev["allowed"] != false || ev["key"] != HashKey(rawKey) || ev["policy"] != "api" {
		t.Errorf("cached denial logged as %v", ev)
	}
	for _, k := range []string{"store_latency_us", "mode", "error"} {
		if _, ok := ev[k]; ok {
			t.Errorf("unexpected %s=%v in a cached denial's log", k, ev[k])
		}
	}

	// Redis dies. Cached denials go on answering, and they are not store calls: they
	// never reach the breaker, which opens on the failures of the other requests as if
	// the cached ones had not been made (five cached answers between failures would
	// otherwise count as successes and keep it closed).
	srv.Kill()
	for i := range 8 {
		if d, err := decide(ctx, lim, sluice.Request{Key: fmt.Sprint("other:", i), Limit: limit, N: 1, Policy: "api"}); err != nil || !d.Allowed || d.Path != sluice.PathOpen {
			t.Fatalf("with Redis down, fail open: %+v, %v", d, err)
		}
		for range 5 {
			if d, err := decide(ctx, lim, req); err != nil || d.Path != sluice.PathCache {
				t.Fatalf("a cached denial with Redis down: %+v, %v", d, err)
			}
		}
	}
	if s := fo.State(); s != store.BreakerOpen {
		t.Errorf("breaker %v after 8 failed store calls among 40 cached answers, want open", s)
	}
}

// gatherText returns the names of every metric family reg holds.
func gatherText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		b.WriteString(mf.GetName() + "\n")
	}
	return b.String()
}

// TestMetricsInterleavedPolicies: decisions of several policies, recorded from several
// goroutines in runs and in strict alternation (so that the last policy's series are
// found again, replaced and raced for), each count in their own policy's series only.
func TestMetricsInterleavedPolicies(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	policies := []string{"a", "b", "c", "a:long-name"}
	const workers, perWorker = 4, 3000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				// Worker 0 changes policy every decision, worker w keeps one for runs
				// of w+1 decisions.
				p := policies[(i/(w+1)+w)%len(policies)]
				d := sluice.Decision{Allowed: i%3 != 0, Path: sluice.PathStore}
				m.record(p, &d, nil, "", store.BreakerNone, time.Microsecond, i%2 == 0)
			}
		})
	}
	wg.Wait()
	for _, p := range policies {
		var allowed, denied, called float64
		for w := range workers {
			for i := range perWorker {
				if policies[(i/(w+1)+w)%len(policies)] != p {
					continue
				}
				if i%3 != 0 {
					allowed++
				} else {
					denied++
				}
				if i%2 == 0 {
					called++
				}
			}
		}
		for result, want := range map[string]float64{"allowed": allowed, "denied": denied} {
			if got := metricValue(t, reg, "sluice_decisions_total", map[string]string{"policy": p, "result": result, "path": "store"}); got != want {
				t.Errorf("sluice_decisions_total{policy=%q,result=%q} = %v, want %v", p, result, got, want)
			}
		}
		if got := metricValue(t, reg, "sluice_store_latency_seconds", map[string]string{"policy": p}); got != called {
			t.Errorf("sluice_store_latency_seconds{policy=%q} has %v samples, want %v", p, got, called)
		}
	}
}
