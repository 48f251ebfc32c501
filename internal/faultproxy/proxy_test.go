package faultproxy

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		t.Fatalf("echo = %q", line)
	}
	return time.Since(start), nil
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestLatency(t *testing.T) {
	t.Parallel()
	p := Start(t, echoServer(t))
	c, r := dial(t, p)
	if _, err := roundTrip(t, c, r, time.Second); err != nil {
		t.Fatal(err)
	}
	const d = 40 * time.Millisecond
	p.SetLatency(d)
	rtt, err := roundTrip(t, c, r, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 2*d {
		t.Errorf("round trip %v with %v latency each way, want ≥ %v", rtt, d, 2*d)
	}
	// Latency does not serialise a pipeline: 20 lines sent at once arrive about 2d later,
	// not 20 × 2d = 1.6s. The bound, half of that, leaves 720ms of slack for scheduling
	// on two busy cores.
	start := time.Now()
	for i := 0; i < 20; i++ {
		if _, err := c.Write([]byte("ping\n")); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el > 20*2*d/2 {
		t.Errorf("20 pipelined lines took %v, want about %v", el, 2*d)
	}
	// Without latency a round trip takes less than d: the least of five, so that a
	// machine that deschedules the test for d at one of them does not fail it.
	p.SetLatency(0)
	least := time.Hour
	for range 5 {
		rtt, err := roundTrip(t, c, r, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		least = min(least, rtt)
	}
	if least >= d {
		t.Errorf("after removing latency: the least of five round trips took %v", least)
	}
}

func TestCutAndRefuse(t *testing.T) {
	t.Parallel()
	p := Start(t, echoServer(t))
	c, r := dial(t, p)
	if _, err := roundTrip(t, c, r, time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if _, err := roundTrip(t, c, r, time.Second); err == nil {
		t.Fatal("connection still works after Cut")
	}
	// New connections still work after a cut.
	c2, r2 := dial(t, p)
	if _, err := roundTrip(t, c2, r2, time.Second); err != nil {
		t.Fatalf("new connection after Cut: %v", err)
	}
	p.SetRefuse(true)
	c3, r3 := dial(t, p)
	if _, err := roundTrip(t, c3, r3, time.Second); err == nil {
		t.Fatal("refused connection worked")
	}
	if _, err := roundTrip(t, c2, r2, time.Second); err != nil {
		t.Fatalf("refusing new connections broke an open one: %v", err)
	}
	p.SetRefuse(false)
	c4, r4 := dial(t, p)
	if _, err := roundTrip(t, c4, r4, time.Second); err != nil {
		t.Fatalf("after SetRefuse(false): %v", err)
	}
}

func TestBlackhole(t *testing.T) {
	t.Parallel()
	p := Start(t, echoServer(t))
	c, r := dial(t, p)
	p.SetBlackhole(true)
	if _, err := roundTrip(t, c, r, 100*time.Millisecond); err == nil {
		t.Fatal("traffic passed a blackhole")
	}
	p.SetBlackhole(false)
	// The held line is delivered once the blackhole lifts.
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("held data after lifting: %q, %v", line, err)
	}
}

func TestCloseEndsConnections(t *testing.T) {
	t.Parallel()
	p, err := New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p)
	p.SetBlackhole(true)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(t, c, r, time.Second); err == nil {
		t.Fatal("connection works after Close")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), 200*time.Millisecond); err == nil {
		t.Fatal("proxy accepts after Close")
	}
}
