package httplimit

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestDecisionLogUnits: the decision log writes durations with the unit in the field
// name (retry_after_ms, reset_after_ms), never as bare nanoseconds.
func TestDecisionLogUnits(t *testing.T) {
	store, _ := newStore(t)
	var logs bytes.Buffer
	h := mustNew(t, Config{Limiter: store, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Policies: []Policy{{Name: "p", Limit: sluice.PerMinute(1)}}}).Handler(okHandler)
	do(h, "GET", "/", "")
	do(h, "GET", "/", "")
	var denied map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "rate limit denied" {
			denied = m
		}
	}
	if denied == nil {
		t.Fatalf("no denial logged:\n%s", logs.String())
	}
	if ra, _ := denied["retry_after_ms"].(float64); ra <= 0 || ra > 60000 {
		t.Errorf("retry_after_ms = %v, want (0, 60000]", denied["retry_after_ms"])
	}
	if _, ok := denied["reset_after_ms"].(float64); !ok {
		t.Errorf("no reset_after_ms in %v", denied)
	}
	for _, k := range []string{"retry_after", "reset_after"} {
		if _, ok := denied[k]; ok {
			t.Errorf("%s: a duration without its unit", k)
		}
	}
}
