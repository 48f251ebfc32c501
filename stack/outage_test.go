package stack_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/stack"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.b.Bytes())
}

// TestOutageLogIsBounded: with its redis-server killed, a stack under load writes a
// bounded number of log lines (the first failure of each kind at once, then one summary
// per kind, mode and policy per interval) and yet accounts for every failure decision
// exactly: lines of their own plus the summaries' counts (issue 20, item 12: a 2 s outage
// at 200 requests/s wrote 421 WARN lines before).
func TestOutageLogIsBounded(t *testing.T) {
	srv := redistest.Start(t)
	var logs lockedBuffer
	const every = 200 * time.Millisecond
	st, err := stack.Open(nil, stack.Options{
		RedisURL: srv.URL(), Deadline: 50 * time.Millisecond, FailureMode: sluice.FailOpen,
		DenyCache: stack.DenyCache{Off: true}, Sampling: 0, FailureSummary: every,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lim := st.Limiter()
	limit := sluice.PerMinute(1000)
	ctx := context.Background()
	if d, err := sluice.AllowN(ctx, lim, "warm", limit, 1); err != nil || d.Path != sluice.PathStore {
		t.Fatalf("before the outage: %+v, %v", d, err)
	}
	srv.Kill()

	policies := []string{"a", "b"}
	var failed [2]atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			ds := make([]sluice.Decision, 1)
			for i := range 600 {
				p := (w + i) % 2
				req := []sluice.Request{{Key: "k", Limit: limit, N: 1, Policy: policies[p]}}
				if _, err := lim.Decide(ctx, req, ds); err != nil {
					t.Errorf("fail open returned an error: %v", err)
					return
				}
				if ds[0].Path == sluice.PathOpen {
					failed[p].Add(1)
				}
				time.Sleep(time.Millisecond) // real-fault test: pacing, a steady load over several intervals
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	st.Close() // flushes the last interval's summary

	full := map[string]int64{}
	summarised := map[string]int64{}
	type group struct{ policy, kind, path, mode string }
	groups := map[group]bool{}
	lines, firstSummary, firstFull := 0, -1, -1
	sc := bufio.NewScanner(bytes.NewReader(logs.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Msg, Level, Policy, Path, Mode string
			Kind                           string `json:"error_kind"`
			Suppressed                     int64
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if ev.Level != "WARN" || ev.Policy == "" || ev.Policy == "default" {
			continue // the breaker's transitions, the warm-up
		}
		lines++
		groups[group{ev.Policy, ev.Kind, ev.Path, ev.Mode}] = true
		switch ev.Msg {
		case "rate limit decision":
			if firstFull < 0 {
				firstFull = lines
			}
			if ev.Kind == "" {
				t.Errorf("a failure logged without its error_kind: %s", sc.Text())
			}
			full[ev.Policy]++
		case "rate limit failures":
			if firstSummary < 0 {
				firstSummary = lines
			}
			summarised[ev.Policy] += ev.Suppressed
		}
	}
	var total int64
	for p, name := range policies {
		n := failed[p].Load()
		total += n
		if got := full[name] + summarised[name]; got != n {
			t.Errorf("policy %s: %d failure decisions, the log accounts for %d (%d lines + %d summarised)",
				name, n, got, full[name], summarised[name])
		}
	}
	intervals := int(elapsed/every) + 2
	bound := 2 * len(groups) * intervals
	t.Logf("%d failure decisions in %v: %d log lines, %d groups, bound %d", total, elapsed.Round(time.Millisecond), lines, len(groups), bound)
	if total < 2000 {
		t.Fatalf("only %d failure decisions: the outage was not under load", total)
	}
	if lines > bound || len(groups) > 8 {
		t.Errorf("%d lines in %d groups over %d intervals: not bounded by the interval", lines, len(groups), intervals)
	}
	if firstFull < 0 || (firstSummary >= 0 && firstSummary < firstFull) {
		t.Errorf("the first failure was not logged in full before any summary (full at line %d, summary at %d)", firstFull, firstSummary)
	}
}
