package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/hashslot"
	"github.com/sluicehq/sluice/store"
)

// redisHashTag is the part of key Redis Cluster hashes: between the first '{' and the next
// '}' when that is not empty, else the whole key.
func redisHashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// FuzzKey: the Redis keys of two different identities under one Limit always differ
// (escaping is injective), and every key of an identity hashes to the identity's slot
// whatever bytes it holds (any key store.CheckKey accepts) ('{', '}', '%', ':', NUL, invalid UTF-8): an identity can
// neither collide with another nor move its state to another slot.
func FuzzKey(f *testing.F) {
	f.Add("user:42", "user:42}")
	f.Add("%7B", "{")
	f.Add("a}b{c", "a%7Db%7Bc")
	f.Add("{}", "%25")
	f.Add("", "\x00")
	f.Fuzz(func(t *testing.T, a, b string) {
		if store.CheckKey(a) != nil || store.CheckKey(b) != nil {
			return // outside the target: the store refuses them before building a key
		}
		s := newStore(options{prefix: DefaultPrefix})
		for _, l := range []sluice.Limit{sluice.PerSecond(10), {Algorithm: sluice.SlidingLog, Rate: 3, Period: time.Minute}} {
			ka, kb := s.Key(a, l), s.Key(b, l)
			if a != b && ka == kb {
				t.Fatalf("identities %q and %q share the key %q", a, b, ka)
			}
			if a == b && ka != kb {
				t.Fatalf("identity %q has two keys %q and %q", a, ka, kb)
			}
			if got, want := hashslot.Tag(redisHashTag(ka)), idSlot(a); got != want {
				t.Fatalf("identity %q: key %q hashes to slot %d, its identity's slot is %d", a, ka, got, want)
			}
			if !strings.HasPrefix(ka, DefaultPrefix+"{") {
				t.Fatalf("key %q does not start with the prefix and the hash tag", ka)
			}
		}
	})
}
