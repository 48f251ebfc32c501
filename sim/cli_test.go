package sim

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/clocktest"
)

// runCLI runs RunCLI with the options args set as `sluice simulate` flags would
// ("--name", "value" pairs), the others at their defaults.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	o := CLI{Pattern: "all", Algorithms: "all", Format: "table", Seed: 1, Scale: 1}
	for i := 0; i+1 < len(args); i += 2 {
		v := args[i+1]
		switch args[i] {
		case "--pattern":
			o.Pattern = v
		case "--algorithms":
			o.Algorithms = v
		case "--format":
			o.Format = v
		case "--out":
			o.Out = v
		case "--seed":
			o.Seed, err = strconv.ParseUint(v, 10, 64)
		case "--scale":
			o.Scale, err = strconv.ParseFloat(v, 64)
		default:
			t.Fatalf("runCLI: unknown option %s", args[i])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var out, e bytes.Buffer
	err = RunCLI(context.Background(), o, &out, &e)
	return out.String(), e.String(), err
}

func TestCLIFormats(t *testing.T) {
	base := []string{"--pattern", "steady-2x,boundary", "--algorithms", "fixed_window,sliding-log", "--scale", "0.1", "--seed", "3"}
	t.Run("json", func(t *testing.T) {
		out, _, err := runCLI(t, append(base, "--format", "json")...)
		if err != nil {
			t.Fatal(err)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil {
			t.Fatalf("not a JSON list: %v\n%s", err, out)
		}
		if len(rows) != 4 {
			t.Fatalf("%d rows, want 2 patterns × 2 algorithms", len(rows))
		}
		for _, f := range []string{"pattern", "algorithm", "admitted", "denied", "max_window_ratio", "false_allow_rate", "false_deny_rate"} {
			if _, ok := rows[0][f]; !ok {
				t.Errorf("JSON objects lack %q: %v", f, rows[0])
			}
		}
		if rows[0]["pattern"] != "steady-2x" || rows[0]["algorithm"] != "fixed_window" || rows[3]["algorithm"] != "sliding_log" {
			t.Errorf("rows out of order: %v … %v", rows[0], rows[3])
		}
		if rows[2]["pattern"] != "boundary" || rows[2]["max_window_ratio"] != 2.0 {
			t.Errorf("boundary under fixed_window: %v, want max_window_ratio 2", rows[2])
		}
	})
	t.Run("csv", func(t *testing.T) {
		out, _, err := runCLI(t, append(base, "--format", "csv")...)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 5 || strings.Join(recs[0], ",") != strings.Join(csvHeader, ",") {
			t.Fatalf("got %d records, header %v", len(recs), recs[0])
		}
		if recs[1][0] != "steady-2x" || recs[1][1] != "fixed_window" || recs[1][12] == "" || recs[2][12] != "" {
			t.Errorf("rows %v / %v: rate_error should be set for fixed_window only", recs[1], recs[2])
		}
	})
	t.Run("table", func(t *testing.T) {
		out, stderr, err := runCLI(t, base...)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"max window", "steady-2x", "sliding_log", "2.000×", "exact ("} {
			if !strings.Contains(out, want) {
				t.Errorf("table lacks %q:\n%s", want, out)
			}
		}
		if stderr != "" {
			t.Errorf("stderr not a terminal, yet got %q", stderr)
		}
	})
}

func TestCLIWritesTheReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.html")
	if _, _, err := runCLI(t, "--pattern", "on-off", "--scale", "0.1", "--out", path, "--format", "json"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), `<svg class="chart"`); n != 6 {
		t.Errorf("report has %d charts, want 6", n)
	}
}

func TestCLIUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--pattern", "nope"}, "--pattern"},
		{[]string{"--algorithms", "gcra,bogus"}, `unknown algorithm "bogus": a simulation runs gcra, token_bucket, leaky_bucket, fixed_window, sliding_window, sliding_log`},
		// Concurrency limits requests in flight: it is neither run nor offered.
		{[]string{"--algorithms", "concurrency"}, `unknown algorithm "concurrency": a simulation runs gcra,`},
		{[]string{"--format", "xml"}, "--format"},
		{[]string{"--scale", "0"}, "--scale"},
		{[]string{"--scale", "1001"}, "--scale"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, stderr, err := runCLI(t, tc.args...)
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want ErrUsage naming %q", err, tc.want)
			}
			if _, offered, _ := strings.Cut(err.Error(), "runs "); strings.Contains(offered, "concurrency") {
				t.Errorf("err = %v suggests an algorithm a simulation cannot run", err)
			}
			if stderr != "" {
				t.Errorf("stderr = %q: RunCLI leaves reporting to its caller", stderr)
			}
		})
	}
	if _, _, err := runCLI(t, "--pattern", "steady-1x", "--scale", "0.1", "--out", filepath.Join(t.TempDir(), "no", "such", "dir.html")); err == nil || errors.Is(err, ErrUsage) {
		t.Errorf("unwritable --out: err = %v, want a plain error", err)
	}
}

func TestProgressAppearsOnlyAfterTheDelay(t *testing.T) {
	var buf bytes.Buffer
	clk := clocktest.New(time.Now())
	p := newProgress(&buf, 50*time.Millisecond, clk.Now)
	clk.Advance(49 * time.Millisecond)
	p.update(10, 100)
	if buf.Len() != 0 {
		t.Fatalf("drew before the delay: %q", buf.String())
	}
	clk.Advance(time.Millisecond)
	p.update(50, 100)
	p.update(150, 100) // closed-loop patterns overshoot the estimate
	p.finish()
	if !strings.Contains(buf.String(), "simulating") {
		t.Errorf("no progress bar after the delay: %q", buf.String())
	}
}
