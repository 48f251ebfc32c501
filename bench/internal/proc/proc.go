// Package proc is what the benchmark commands need of the processes they start: a free
// loopback port to give one, a wait until it listens, and the CPU time it has used, read
// from /proc (Linux), so that a process's cost per request is measured apart from the load
// generator's.
package proc

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. It panics when no
// port can be had: then no benchmark can run on this machine.
func FreePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("no free port on 127.0.0.1: %v", err))
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// FreeAddr is FreePort as a "127.0.0.1:port" address.
func FreeAddr() string { return fmt.Sprintf("127.0.0.1:%d", FreePort()) }

// WaitTCP waits until addr accepts a connection, for at most within.
func WaitTCP(addr string, within time.Duration) error {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
	}
	return fmt.Errorf("%s not listening after %v", addr, within)
}

// WaitHTTP waits until a GET of url answers 200, for at most within.
func WaitHTTP(url string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after %v: %v", url, within, last)
}

// CPU returns the CPU time (user + system), in microseconds, that process pid has used;
// 0 if it cannot be read (the process has gone).
func CPU(pid int) int64 {
	f := stat(pid)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const ticksPerSecond = 100 // USER_HZ on Linux
	return (ut + st) * (1e6 / ticksPerSecond)
}

// TreeCPU returns the CPU time, in microseconds, that process pid and its live descendants
// (nginx's workers, say) have used.
func TreeCPU(pid int) int64 {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := stat(p); len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			children[pp] = append(children[pp], p)
		}
	}
	var total int64
	var walk func(int)
	walk = func(p int) {
		total += CPU(p)
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return total
}

// stat returns the fields of /proc/<pid>/stat after the command name (which is in
// parentheses and may hold spaces): [0] is the state, [1] the parent's pid, [11] and [12]
// utime and stime in ticks.
func stat(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
}

// Given reports whether the named flag (package flag) was set on the command line: a
// benchmark passes such a flag on to a binary it did not build only when given, so that
// a binary from before the flag still runs.
func Given(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
