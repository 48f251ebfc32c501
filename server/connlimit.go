package server

import (
	"net"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxConnections is Options.MaxConnections when 0: with the service's other
// defaults, both listeners full fit the shipped chart's memory limit.
const DefaultMaxConnections = 1024

// DefaultProxyMaxConnections is the bound LimitProxyListener applies when given 0.
const DefaultProxyMaxConnections = 4096

// connLimits bound the connections open at once on listeners and export how many are
// open and how many were refused, by listener.
type connLimits struct {
	max     int64 // 0: unbounded
	open    *prometheus.GaugeVec
	refused *prometheus.CounterVec
}

// LimitProxyListener bounds ln, the proxy's listener, to max client connections open at
// once (0: DefaultProxyMaxConnections; negative: no bound): one more is closed as soon as
// it is accepted. It exports sluice_proxy_connections and
// sluice_proxy_connections_refused_total in reg.
func LimitProxyListener(ln net.Listener, max int, reg prometheus.Registerer) (net.Listener, error) {
	l, err := connLimitsOf(reg, "proxy", "proxy's --max-connections", cmpMax(max, DefaultProxyMaxConnections))
	if err != nil {
		return nil, err
	}
	return l.listener(ln, "proxy"), nil
}

// cmpMax is max, def for 0, and 0 (no bound) for a negative max.
func cmpMax(max, def int) int64 {
	switch {
	case max == 0:
		return int64(def)
	case max > 0:
		return int64(max)
	}
	return 0
}

// connLimitsOf makes a bound of max connections (0: none) for the listeners of
// subsystem; setting names the bound in the refusals' help.
func connLimitsOf(reg prometheus.Registerer, subsystem, setting string, max int64) (*connLimits, error) {
	l := &connLimits{
		max:  max,
		open: newGaugeVec("sluice_"+subsystem+"_connections", "Connections open, by listener.", "listener"),
		refused: newCounterVec("sluice_"+subsystem+"_connections_refused_total",
			"Connections closed as soon as accepted because the listener had its maximum open ("+setting+"), by listener.", "listener"),
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
// as it is accepted, and counted, rather than left waiting unseen in the backlog.
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
