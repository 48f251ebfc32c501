package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/internal/procstat"
	"github.com/sluicehq/sluice/stack"
)

// answerAtOnce is an upstream transport that answers 200 with a 3-byte body without a
// connection, so that the proxy benchmarks measure the proxy's own work.
type answerAtOnce struct{}

func (answerAtOnce) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/plain"}, "Content-Length": {"3"}}, ContentLength: 3,
		Body: io.NopCloser(strings.NewReader("ok\n")), Request: r}, nil
}

// BenchmarkProxy measures one request through the proxy as `sluice proxy` builds it (the
// stack from stack.Open on memory, with a metrics registry and an info-level JSON
// logger), a policy per X-Client header over 100k clients that never denies, against a
// bare httputil.ReverseProxy with the same upstream and the same rewrite, without and
// with the proxy's BufferPool. The difference to bare-pooled is what the limiter, its
// headers, logs and metrics cost per request;
// bench/cmd/proxybench measures the whole proxy over loopback.
func BenchmarkProxy(b *testing.B) {
	const clients = 100_000
	reqs := make([]*http.Request, clients)
	for i := range reqs {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Client", fmt.Sprintf("client-%d", i))
		reqs[i] = r
	}
	up, _ := url.Parse("http://upstream.test")
	run := func(b *testing.B, h http.Handler) {
		var next atomic.Int64
		b.ReportAllocs()
		cpu0 := procstat.CPU()
		b.RunParallel(func(pb *testing.PB) {
			w := &discardWriter{h: http.Header{}}
			for pb.Next() {
				clear(w.h)
				h.ServeHTTP(w, reqs[next.Add(1)%clients])
			}
		})
		// CPU time depends less than wall time on what else the machine runs.
		b.ReportMetric(float64(procstat.CPU()-cpu0)/float64(b.N), "cpu-ns/op")
	}
	b.Run("bare", func(b *testing.B) {
		run(b, &httputil.ReverseProxy{
			Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(up); pr.SetXForwarded() },
			Transport: answerAtOnce{},
		})
	})
	b.Run("bare-pooled", func(b *testing.B) {
		run(b, &httputil.ReverseProxy{
			Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(up); pr.SetXForwarded() },
			Transport:  answerAtOnce{},
			BufferPool: copyBuffers{},
		})
	})
	b.Run("sluice", func(b *testing.B) {
		cfg, err := config.Parse(config.File{Name: "policies.yaml", Data: []byte(
			"policies:\n  - name: clients\n    key: {type: user, header: X-Client}\n    rate: 1000\n    period: second\n")})
		if err != nil {
			b.Fatal(err)
		}
		log := slog.New(slog.NewJSONHandler(io.Discard, nil))
		st := openStack(b, cfg, stack.Options{Logger: log, Registry: prometheus.NewRegistry()})
		p, err := NewProxy(ProxyOptions{Limiter: st.Limiter(), Upstream: up, Config: cfg, Logger: log, Transport: answerAtOnce{}})
		if err != nil {
			b.Fatal(err)
		}
		run(b, p)
	})
}

// discardWriter is a ResponseWriter that keeps nothing but a reusable header map.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
