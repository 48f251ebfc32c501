package redistest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/hashslot"
)

// Cluster is a Redis Cluster owned by a test.
type Cluster struct {
	tb testing.TB
	// Nodes are the primaries as created, in the order redis-cli assigned slots: Nodes[0]
	// holds the lowest slots. After a failover a replica serves a primary's slots.
	Nodes []*Server
	// Replicas are the replicas (StartClusterWithReplicas): Replicas[i] replicates
	// Nodes[i].
	Replicas []*Server
}

// StartCluster starts a cluster of 3 primaries (no replicas), slots assigned as
// `redis-cli --cluster create` does, waits until it is healthy (WaitHealthy), and stops it
// when the test ends. Options apply to every node.
func StartCluster(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	return startCluster(tb, false, 2000, opts)
}

// StartClusterWithReplicas starts a cluster of 3 primaries, each with one replica
// (Replicas[i] of Nodes[i]), whose nodes time out after nodeTimeout (so a replica takes
// over about nodeTimeout after its primary dies), and waits until every replica has
// synchronised.
func StartClusterWithReplicas(tb testing.TB, nodeTimeout time.Duration, opts ...Option) *Cluster {
	tb.Helper()
	return startCluster(tb, true, int(nodeTimeout/time.Millisecond), opts)
}

func startCluster(tb testing.TB, replicas bool, timeoutMS int, opts []Option) *Cluster {
	const primaries = 3
	c := &Cluster{tb: tb}
	buses := map[*Server]int{}
	node := func() *Server {
		bus, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: cluster bus port: %v", err)
		}
		s := start(tb, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(timeoutMS),
			"--cluster-port", strconv.Itoa(bus),
			// A replica's first sync starts at once, not after the default 5 s.
			"--repl-diskless-sync-delay", "0",
		}, opts)
		buses[s] = bus
		return s
	}
	for range primaries {
		c.Nodes = append(c.Nodes, node())
	}
	// As redis-cli --cluster create, without its waits: a third of the slots each.
	for i, n := range c.Nodes {
		lo, hi := i*16384/primaries, (i+1)*16384/primaries-1
		if out, err := n.Do("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			tb.Fatalf("redistest: CLUSTER ADDSLOTSRANGE: %v %s", err, out)
		}
		if i > 0 {
			c.meet(n, c.Nodes[0], buses[c.Nodes[0]])
		}
	}
	c.WaitHealthy()
	if !replicas {
		return c
	}
	// Each replica meets its own primary and replicates it, so that Replicas[i]
	// replicates Nodes[i].
	for _, p := range c.Nodes {
		r := node()
		c.Replicas = append(c.Replicas, r)
		id, err := p.Do("CLUSTER", "MYID")
		if err != nil {
			tb.Fatalf("redistest: CLUSTER MYID: %v", err)
		}
		c.meet(r, p, buses[p])
		// REPLICATE fails until the replica has learnt of its primary by gossip.
		wait(tb, "CLUSTER REPLICATE "+id+" on "+r.Addr(), func() error {
			_, err := r.Do("CLUSTER", "REPLICATE", id)
			return err
		})
	}
	c.WaitHealthy()
	for _, r := range c.Replicas {
		wait(tb, "replica "+r.Addr()+" in sync", func() error {
			info, err := r.Do("INFO", "replication")
			if st, _ := InfoField(info, "master_link_status"); err == nil && st == "up" {
				return nil
			}
			return fmt.Errorf("%v %q", err, info)
		})
	}
	return c
}

// meet introduces n to other, whose cluster bus listens on bus.
func (c *Cluster) meet(n, other *Server, bus int) {
	c.tb.Helper()
	if out, err := n.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(other.Port()), strconv.Itoa(bus)); err != nil {
		c.tb.Fatalf("redistest: CLUSTER MEET: %v %s", err, out)
	}
}

// all is every node, primaries first.
func (c *Cluster) all() []*Server { return append(append([]*Server(nil), c.Nodes...), c.Replicas...) }

// Addrs are the primaries' "127.0.0.1:port" addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// WaitHealthy waits until every running node reports cluster_state:ok with all 16384
// slots assigned and every node known (a dead node is still known), failing the test
// after a timeout.
func (c *Cluster) WaitHealthy() {
	c.tb.Helper()
	wait(c.tb, "cluster healthy", c.healthy)
}

func (c *Cluster) healthy() error {
	for _, n := range c.all() {
		if !n.Running() {
			continue
		}
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr(), err)
		}
		for field, want := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": "16384",
			"cluster_known_nodes":    strconv.Itoa(len(c.all())),
		} {
			got, err := InfoField(info, field)
			if err != nil || got != want {
				return fmt.Errorf("%s: %s is %q, want %q", n.Addr(), field, got, want)
			}
		}
		// Every node must also agree on who serves every slot.
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

// NodeForKey returns the primary serving key's slot (a promoted replica after a
// failover).
func (c *Cluster) NodeForKey(key string) *Server {
	c.tb.Helper()
	return c.NodeForSlot(Slot(key))
}

// NodeForSlot returns the running primary serving slot.
func (c *Cluster) NodeForSlot(slot int) *Server {
	c.tb.Helper()
	for _, n := range c.all() {
		if !n.Running() {
			continue
		}
		reply, err := n.Do("CLUSTER", "NODES")
		if err != nil {
			c.tb.Fatalf("redistest: CLUSTER NODES on %s: %v", n.Addr(), err)
		}
		for _, line := range strings.Split(reply, "\n") {
			fields := strings.Fields(line)
			if len(fields) < 9 || !strings.Contains(fields[2], "myself") {
				continue
			}
			for _, r := range fields[8:] { // "lo-hi", "slot", or "[slot->-id]" (migrating)
				lo, hi := -1, -1
				if k, _ := fmt.Sscanf(r, "%d-%d", &lo, &hi); k == 1 {
					hi = lo
				}
				if lo <= slot && slot <= hi {
					return n
				}
			}
		}
	}
	c.tb.Fatalf("redistest: no node serves slot %d", slot)
	return nil
}

// Slot is the Redis Cluster hash slot of key (hashslot.Of).
func Slot(key string) int { return int(hashslot.Of(key)) }
