// Package faultproxy is a TCP proxy for fault-injection tests: it sits between a client and
// a server on loopback and, on command, delays traffic, cuts every open connection, refuses
// new ones, or swallows traffic without closing anything (a partition).
//
// Latency is added per chunk, in both directions, without serialising: a pipelined stream
// keeps its throughput and every byte arrives Latency later than it would have.
package faultproxy

import (
	"maps"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// Proxy forwards connections accepted on Addr to a target address.
// Its methods may be called from any goroutine.
type Proxy struct {
	target string
	ln     net.Listener

	mu        sync.Mutex
	latency   time.Duration
	refuse    bool
	blackhole bool
	unblock   chan struct{} // closed when blackhole is lifted
	conns     map[*link]struct{}
	closed    bool
	wg        sync.WaitGroup
}

// New listens on a free loopback port and forwards every connection to target.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*link]struct{}), unblock: make(chan struct{})}
	close(p.unblock)
	p.wg.Go(p.accept)
	return p, nil
}

// Start is New that fails tb on error and closes the proxy when the test ends.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := New(target)
	if err != nil {
		tb.Fatalf("faultproxy: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr is the proxy's "127.0.0.1:port"; clients connect here.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of data read after the call by d in each direction (so a
// round trip gains 2d). Zero removes the delay.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Cut closes every open connection (clients see a reset or EOF). New connections are
// still accepted.
func (p *Proxy) Cut() {
	p.mu.Lock()
	links := slices.Collect(maps.Keys(p.conns))
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// SetRefuse makes the proxy close new connections as soon as they are accepted (true), or
// forward them again (false). Open connections are not affected; combine with Cut.
func (p *Proxy) SetRefuse(refuse bool) {
	p.mu.Lock()
	p.refuse = refuse
	p.mu.Unlock()
}

// SetBlackhole makes the proxy hold all traffic without forwarding or closing anything
// (true), as a network partition does: clients time out. Lifting it (false) delivers what
// was held.
func (p *Proxy) SetBlackhole(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on == p.blackhole {
		return
	}
	p.blackhole = on
	if on {
		p.unblock = make(chan struct{})
	} else {
		close(p.unblock)
	}
}

// Close stops accepting, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	if p.blackhole {
		p.blackhole = false
		close(p.unblock)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		if refuse || closed {
			_ = client.Close()
			continue
		}
		server, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		l := &link{client: client, server: server, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			l.close()
			continue
		}
		p.conns[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() {
			var inner sync.WaitGroup
			inner.Go(func() { p.pipe(l, server, client) })
			inner.Go(func() { p.pipe(l, client, server) })
			inner.Wait()
			p.mu.Lock()
			delete(p.conns, l)
			p.mu.Unlock()
		})
	}
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

func (l *link) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst. A reader stamps each chunk with its due time and a writer sends
// it then, so latency delays data without limiting throughput.
func (p *Proxy) pipe(l *link, dst, src net.Conn) {
	queue := make(chan chunk, 1024)
	read := make(chan struct{})
	defer func() { l.close(); <-read }()
	go func() {
		defer close(read)
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				due := time.Now().Add(p.latency)
				p.mu.Unlock()
				select {
				case queue <- chunk{data: buf[:n], due: due}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range queue {
		if d := time.Until(c.due); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-l.done:
				return
			}
		}
		p.mu.Lock()
		unblock := p.unblock
		p.mu.Unlock()
		select {
		case <-unblock:
		case <-l.done:
			return
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}
