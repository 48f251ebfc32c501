package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of primaries without replicas, owned by a test.
type Cluster struct {
	tb testing.TB
	// Nodes are the primaries, in the order redis-cli assigned slots: Nodes[0] holds the
	// lowest slots.
	Nodes []*Server
}

// StartCluster starts a cluster of 3 primaries (no replicas) with
// `redis-cli --cluster create`, waits until every node reports cluster_state:ok and knows
// every slot, and stops it when the test ends. Options apply to every node.
func StartCluster(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	const primaries = 3
	c := &Cluster{tb: tb}
	for i := 0; i < primaries; i++ {
		bus, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: cluster bus port: %v", err)
		}
		c.Nodes = append(c.Nodes, start(tb, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
			"--cluster-port", strconv.Itoa(bus),
		}, opts))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := cli(tb, args...); err != nil {
		tb.Fatalf("redistest: create cluster: %v\n%s", err, out)
	}
	c.WaitHealthy()
	return c
}

// Addrs are the primaries' "127.0.0.1:port" addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// WaitHealthy waits until every running node reports cluster_state:ok with all 16384
// slots assigned and every node known, failing the test after a timeout.
func (c *Cluster) WaitHealthy() {
	c.tb.Helper()
	deadline := time.Now().Add(startTimeout)
	for {
		err := c.healthy()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("redistest: cluster not healthy after %v: %v", startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) healthy() error {
	for _, n := range c.Nodes {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr(), err)
		}
		for field, want := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": "16384",
			"cluster_known_nodes":    strconv.Itoa(len(c.Nodes)),
		} {
			got, err := InfoField(info, field)
			if err != nil || got != want {
				return fmt.Errorf("%s: %s is %q, want %q", n.Addr(), field, got, want)
			}
		}
		// Every node must also agree on who serves every slot, or a client that asks it
		// for the slot map is sent the wrong way.
		slots, err := n.Do("CLUSTER", "SLOTS")
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr(), err)
		}
		if got := strings.Count(slots, "127.0.0.1"); got < len(c.Nodes) {
			return fmt.Errorf("%s: CLUSTER SLOTS names %d nodes", n.Addr(), got)
		}
	}
	return nil
}

// NodeForKey returns the primary serving key's slot.
func (c *Cluster) NodeForKey(key string) *Server {
	c.tb.Helper()
	slot := Slot(key)
	for _, n := range c.Nodes {
		// Each node's own line in CLUSTER NODES ("myself") lists the slot ranges it serves.
		reply, err := n.Do("CLUSTER", "NODES")
		if err != nil {
			c.tb.Fatalf("redistest: CLUSTER NODES on %s: %v", n.Addr(), err)
		}
		for _, line := range strings.Split(reply, "\n") {
			fields := strings.Fields(line)
			if len(fields) < 9 || !strings.Contains(fields[2], "myself") {
				continue
			}
			for _, r := range fields[8:] {
				lo, hi, ok := strings.Cut(r, "-")
				if !ok {
					hi = lo
				}
				l, err1 := strconv.Atoi(lo)
				h, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && l <= slot && slot <= h {
					return n
				}
			}
		}
	}
	c.tb.Fatalf("redistest: no node serves slot %d", slot)
	return nil
}

// Slot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of the hash tag (the part
// between the first '{' and the next '}', when not empty) or of the whole key, mod 16384.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
