package server

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxConnections is Options.MaxConnections when 0: with the other defaults of the
// service (stack.DefaultMaxKeys, the RLQS bounds), both listeners full fit the shipped
// chart's memory limit (bench/README.md has the bytes per connection).
const DefaultMaxConnections = 1024

// connLimits bound the connections open at once on each of Serve's listeners and export
// how many are open and how many were refused, by listener (http, grpc).
type connLimits struct {
	max     int64 // 0: unbounded
	open    *prometheus.GaugeVec
	refused *prometheus.CounterVec
}

func newConnLimits(reg prometheus.Registerer, max int) (*connLimits, error) {
	l := &connLimits{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_server_connections",
			Help: "Connections open, by listener (http, grpc).",
		}, []string{"listener"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_server_connections_refused_total",
			Help: "Connections closed as soon as accepted because the listener had its maximum open (Options.MaxConnections, serve's --max-connections), by listener.",
		}, []string{"listener"}),
	}
	switch {
	case max == 0:
		l.max = DefaultMaxConnections
	case max > 0:
		l.max = int64(max)
	}
	if err := register(reg, []prometheus.Collector{l.open, l.refused}); err != nil {
		return nil, err
	}
	return l, nil
}

// listener returns ln bounded to the connections limit allows, counted under name.
func (l *connLimits) listener(ln net.Listener, name string) net.Listener {
	return &limitListener{Listener: ln, max: l.max, gauge: l.open.WithLabelValues(name), refused: l.refused.WithLabelValues(name)}
}

// limitListener accepts at most max connections open at once: one more is closed as soon
// as it is accepted, and counted. Refusing rather than leaving it in the kernel's backlog
// keeps a client that holds its connections from making the others wait unseen.
type limitListener struct {
	net.Listener
	max     int64
	n       atomic.Int64
	gauge   prometheus.Gauge
	refused prometheus.Counter
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.n.Add(1); l.max > 0 && n > l.max {
			l.n.Add(-1)
			l.refused.Inc()
			c.Close()
			continue
		}
		l.gauge.Inc()
		return &limitConn{Conn: c, l: l}, nil
	}
}

// limitConn gives its place back on its first Close.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.n.Add(-1); c.l.gauge.Dec() })
	return err
}
