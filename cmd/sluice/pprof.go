package main

import (
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/sluicehq/sluice/config"
)

// defaultPprofWriteTimeout is the pprof listener's write timeout: above the 30 s of a
// default CPU profile, so /debug/pprof/profile works as documented.
const defaultPprofWriteTimeout = 60 * time.Second

// pprofFlags are the profiling flags of serve and proxy.
func pprofFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "pprof", Usage: "serve Go's net/http/pprof profiles on this `ADDR`ess (keep it on loopback); empty disables it", Sources: cli.EnvVars("SLUICE_PPROF_ADDR")},
		&cli.DurationFlag{Name: "pprof-write-timeout", Value: defaultPprofWriteTimeout, Usage: "the longest the pprof listener writes one answer: a CPU profile or trace may ask for at most this many seconds", Sources: cli.EnvVars("SLUICE_PPROF_WRITE_TIMEOUT")},
	}
}

// pprofFromFlags serves Go's profiling endpoints as the flags of pprofFlags say, until
// stop is called (nothing when --pprof is empty). The listener reads a request within
// 10 s and writes an answer within --pprof-write-timeout.
func pprofFromFlags(c *cli.Command, log *slog.Logger) (stop func(), err error) {
	addr := c.String("pprof")
	if addr == "" {
		return func() {}, nil
	}
	ln, err := listen("pprof", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: c.Duration("pprof-write-timeout"), IdleTimeout: time.Minute}
	go hs.Serve(ln)
	log.Info("serving pprof", slog.String("addr", ln.Addr().String()))
	return func() { hs.Close() }, nil
}

// cmdline is pprof.Cmdline with the passwords of URLs (--redis, --upstream) redacted, as
// the logs, /readyz and /v1/config redact them.
func cmdline(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte(strings.Join(redactArgs(os.Args), "\x00")))
}

// redactArgs returns args with every URL that carries credentials ("redis://:pw@host",
// also as the value of "--flag=URL") redacted.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		prefix, v := "", a
		if k, val, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
			prefix, v = k+"=", val
		}
		if strings.Contains(v, "://") && strings.Contains(v, "@") {
			out[i] = prefix + config.RedactURL(v)
		}
	}
	return out
}
