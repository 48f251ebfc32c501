package override

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/rueidis"
)

// Redis is a Store in Redis: one hash, <prefix>overrides, whose fields are
// "<policy>\x00<identity>" and whose values are the overrides as JSON, and a counter,
// <prefix>overrides:version, incremented in the same transaction as every change. Servers
// poll the counter (server.Options.OverrideRefresh, 500 ms by default) and reload the hash
// when it moved, so a change reaches every replica within a second, and survives restarts
// of sluice as Redis keeps it. Neither key has a TTL. On a cluster both keys share the hash
// tag {overrides}, so they live in one slot.
type Redis struct {
	client  func() rueidis.Client
	hash    string
	version string
}

// NewRedis returns a Store on the client that client returns (nil while not connected:
// then every call fails), with keys under prefix ("sluice:").
func NewRedis(client func() rueidis.Client, prefix string) *Redis {
	return &Redis{client: client, hash: prefix + "{overrides}", version: prefix + "{overrides}:version"}
}

var errNotConnected = errors.New("override: Redis is not connected")

func field(policy, identity string) string { return policy + "\x00" + identity }

func (s *Redis) conn() (rueidis.Client, error) {
	c := s.client()
	if c == nil {
		return nil, errNotConnected
	}
	return c, nil
}

// Put implements Store.
func (s *Redis) Put(ctx context.Context, o Override) (*Override, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	f := field(o.Policy, o.Identity)
	prev, err := s.get(ctx, c, f)
	if err != nil {
		return nil, err
	}
	if err := s.commit(ctx, c, "storing", c.B().Hset().Key(s.hash).FieldValue().FieldValue(f, string(b)).Build()); err != nil {
		return nil, err
	}
	return prev, nil
}

// commit makes change and increments the version in one transaction.
func (s *Redis) commit(ctx context.Context, c rueidis.Client, what string, change rueidis.Completed) error {
	for _, r := range c.DoMulti(ctx, c.B().Multi().Build(), change, c.B().Incr().Key(s.version).Build(), c.B().Exec().Build()) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("override: %s: %w", what, err)
		}
	}
	return nil
}

func (s *Redis) get(ctx context.Context, c rueidis.Client, f string) (*Override, error) {
	v, err := c.Do(ctx, c.B().Hget().Key(s.hash).Field(f).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("override: reading: %w", err)
	}
	var o Override
	if err := json.Unmarshal([]byte(v), &o); err != nil {
		return nil, nil // not ours to read: treated as absent
	}
	return &o, nil
}

// Delete implements Store.
func (s *Redis) Delete(ctx context.Context, policy, identity string) (*Override, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	f := field(policy, identity)
	prev, err := s.get(ctx, c, f)
	if err != nil || prev == nil {
		return nil, err
	}
	if err := s.commit(ctx, c, "deleting", c.B().Hdel().Key(s.hash).Field(f).Build()); err != nil {
		return nil, err
	}
	return prev, nil
}

// Load implements Store. A field that does not hold an override's JSON is skipped.
func (s *Redis) Load(ctx context.Context) ([]Override, int64, error) {
	c, err := s.conn()
	if err != nil {
		return nil, 0, err
	}
	rs := c.DoMulti(ctx,
		c.B().Multi().Build(),
		c.B().Get().Key(s.version).Build(),
		c.B().Hgetall().Key(s.hash).Build(),
		c.B().Exec().Build(),
	)
	arr, err := rs[3].ToArray()
	if err != nil || len(arr) != 2 {
		return nil, 0, fmt.Errorf("override: loading: %v", err)
	}
	ver, err := arr[0].AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, 0, fmt.Errorf("override: loading the version: %w", err)
	}
	m, err := arr[1].AsStrMap()
	if err != nil {
		return nil, 0, fmt.Errorf("override: loading: %w", err)
	}
	out := make([]Override, 0, len(m))
	for _, v := range m {
		var o Override
		if json.Unmarshal([]byte(v), &o) == nil {
			out = append(out, o)
		}
	}
	return out, ver, nil
}

// Version implements Store.
func (s *Redis) Version(ctx context.Context) (int64, error) {
	c, err := s.conn()
	if err != nil {
		return 0, err
	}
	v, err := c.Do(ctx, c.B().Get().Key(s.version).Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 0, nil
	}
	return v, err
}
