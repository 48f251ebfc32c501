package httplimit

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/clocktest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/stack"
)

func TestTmp(t *testing.T) {
	srv := redistest.Start(t)
	clk := clocktest.New(start)
	st := openStack(t, srv.URL(), stack.Options{Clock: clk.Now})
	srv.Kill()
	var logs bytes.Buffer
	rec := &recorder{Limiter: st.Limiter()}
	h := mustNew(t, Config{Limiter: rec, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Policies: []Policy{
		{Name: "open", Limit: sluice.PerHour(4), Failure: sluice.Failure{Mode: sluice.FailOpen}},
		{Name: "sc", Limit: sluice.PerHour(4), Shadow: true, Failure: sluice.Failure{Mode: sluice.FailClosed}},
	}}).Handler(okHandler)
	w := do(h, "GET", "/", "")
	t.Logf("%d %v\n%s\n%+v", w.Code, w.Header(), logs.String(), rec.calls)
}
