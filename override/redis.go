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

func (s *Redis) conn() (rueidis.Client, error) {
	c := s.client()
	if c == nil {
		return nil, errNotConnected
	}
	return c, nil
}

// Put implements Store.
func (s *Redis) Put(ctx context.Context, o Override) (*Override, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return s.write(ctx, o.Policy, o.Identity, b)
}

// Delete implements Store.
func (s *Redis) Delete(ctx context.Context, policy, identity string) (*Override, error) {
	return s.write(ctx, policy, identity, nil)
}

// write sets the field of policy and identity to v, or deletes it when v is nil (if it
// exists), and increments the version in the same transaction. It returns the override
// the field held.
func (s *Redis) write(ctx context.Context, policy, identity string, v []byte) (*Override, error) {
	c, err := s.conn()
	if err != nil {
		return nil, err
	}
	f := policy + "\x00" + identity
	prev, err := c.Do(ctx, c.B().Hget().Key(s.hash).Field(f).Build()).AsBytes()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, fmt.Errorf("override: reading: %w", err)
	}
	var old *Override
	if json.Unmarshal(prev, &old) != nil {
		old = nil // not ours to read: treated as absent
	}
	what, change := "storing", c.B().Hset().Key(s.hash).FieldValue().FieldValue(f, string(v)).Build()
	if v == nil {
		if old == nil {
			return nil, nil
		}
		what, change = "deleting", c.B().Hdel().Key(s.hash).Field(f).Build()
	}
	for _, r := range c.DoMulti(ctx, c.B().Multi().Build(), change, c.B().Incr().Key(s.version).Build(), c.B().Exec().Build()) {
		if err := r.Error(); err != nil {
			return nil, fmt.Errorf("override: %s: %w", what, err)
		}
	}
	return old, nil
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
