package redisstore

import (
	"cmp"
	"context"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// CheckEviction reads maxmemory-policy on every primary, warns for each one whose policy
// is not noeviction (every key of the store has a TTL), and returns the policy of the
// first that answered. A server that refuses CONFIG is skipped; the error is returned
// only when no primary answered. New runs it in the background.
func (s *Store) CheckEviction(ctx context.Context) (string, error) {
	var policy string
	var firstErr error
	nodes, err := s.primaries(ctx)
	if err != nil {
		return "", err
	}
	for addr, node := range nodes {
		kv, err := node.Do(ctx, node.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
		if err == nil && kv["maxmemory-policy"] == "" {
			err = errorf("CONFIG GET maxmemory-policy on %s returned no value", addr)
		}
		if err != nil {
			s.logger.Debug("redisstore: cannot read maxmemory-policy; eviction safety unchecked", "addr", addr, "error", err)
			firstErr = cmp.Or(firstErr, wrap(ctx, "CONFIG GET maxmemory-policy on "+addr, err))
			continue
		}
		p := kv["maxmemory-policy"]
		policy = cmp.Or(policy, p)
		if p != "noeviction" {
			s.logger.Warn("redisstore: Redis may evict rate-limit keys, which resets their quotas; set maxmemory-policy noeviction or give Redis enough memory",
				"addr", addr, "maxmemory-policy", p)
		}
	}
	if policy == "" && firstErr != nil {
		return "", firstErr
	}
	return policy, nil
}

// checkHz logs, at info level, the primaries whose hz is below 50: Redis expires keys in
// a task run hz times a second, which at hz 10 is most of the store's tail latency.
func (s *Store) checkHz(ctx context.Context) {
	nodes, err := s.primaries(ctx)
	if err != nil {
		return
	}
	for addr, node := range nodes {
		kv, err := node.Do(ctx, node.B().ConfigGet().Parameter("hz").Build()).AsStrMap()
		if err != nil {
			continue
		}
		if hz, err := strconv.Atoi(kv["hz"]); err == nil && hz < 50 {
			s.logger.Info("redisstore: Redis runs its periodic work (key expiry among it) at hz "+kv["hz"]+"; hz 100 lowers the store's tail latency",
				"addr", addr, "hz", hz)
		}
	}
}

// EvictedKeys returns evicted_keys from INFO stats, summed over the primaries. Any growth
// may have reset some quotas.
func (s *Store) EvictedKeys(ctx context.Context) (int64, error) {
	var total int64
	nodes, err := s.primaries(ctx)
	if err != nil {
		return 0, err
	}
	if len(nodes) == 0 {
		return 0, errorf("no primary answered")
	}
	for addr, node := range nodes {
		info, err := node.Do(ctx, node.B().Info().Section("stats").Build()).ToString()
		if err != nil {
			return 0, wrap(ctx, "INFO stats on "+addr, err)
		}
		v, ok := infoField(info, "evicted_keys")
		if !ok {
			return 0, errorf("INFO stats on %s has no evicted_keys", addr)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, wrap(ctx, "INFO stats on "+addr, err)
		}
		total += n
	}
	return total, nil
}

// primaries returns the nodes that are primaries, and those whose role cannot be read.
func (s *Store) primaries(ctx context.Context) (map[string]rueidis.Client, error) {
	cn, err := s.connected()
	if err != nil {
		return nil, err
	}
	nodes := cn.client.Nodes()
	if len(nodes) <= 1 {
		return nodes, nil
	}
	for addr, node := range nodes {
		info, err := node.Do(ctx, node.B().Info().Section("replication").Build()).ToString()
		if err != nil {
			continue
		}
		if role, _ := infoField(info, "role"); role == "slave" {
			delete(nodes, addr)
		}
	}
	return nodes, nil
}

func infoField(info, field string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v, true
		}
	}
	return "", false
}
