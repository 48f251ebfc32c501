package redisstore

import (
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/hashslot"
)

// DefaultPrefix starts every Redis key the store writes, unless WithPrefix says otherwise.
const DefaultPrefix = "sluice:"

// Key layout
//
//	<prefix>{<escaped identity>}:<algorithm>:<rate>:<period µs>:<burst>
//	<prefix>{<escaped identity>}:bucket:<algorithm>:<rate>:<period µs>:<burst>
//
// the second for GCRA, TokenBucket and LeakyBucket limits (one machine, algo.GCRA), for
// example "sluice:{user:42}:bucket:gcra:10:1000000:0". The identity is a Redis Cluster
// hash tag, so all its keys share a slot; the suffix is the whole Limit, as state is kept
// per (key, Limit). Keys of the bucket names without ":bucket" are never read: they
// expire by their TTL (docs/redis.md).
//
// Escaping turns '%' into "%25", '{' into "%7B" and '}' into "%7D", so the hash tag spans
// exactly the identity and two identities never share a key; other bytes need none.

// escapeIdentity applies the escaping above.
func escapeIdentity(id string) string {
	if plain(id) == len(id) {
		return id
	}
	return string(appendEscaped(make([]byte, 0, len(id)+16), id))
}

// plain returns the index of the first byte of id that escaping changes, or len(id).
func plain(id string) int {
	if len(id) < 16 {
		for i := 0; i < len(id); i++ {
			if c := id[i]; c == '%' || c == '{' || c == '}' {
				return i
			}
		}
		return len(id)
	}
	n := len(id)
	for _, c := range [...]byte{'%', '{', '}'} {
		if i := strings.IndexByte(id[:n], c); i >= 0 {
			n = i
		}
	}
	return n
}

// appendEscaped appends id, escaped as above, to b.
func appendEscaped(b []byte, id string) []byte {
	i := plain(id)
	b = append(b, id[:i]...)
	for ; i < len(id); i++ {
		switch c := id[i]; c {
		case '%':
			b = append(b, "%25"...)
		case '{':
			b = append(b, "%7B"...)
		case '}':
			b = append(b, "%7D"...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// idSlot is the cluster slot of every key of identity id, whose hash tag it is.
func idSlot(id string) uint16 { return hashslot.Tag(escapeIdentity(id)) }

// limitTail ends l's keys: the '}' that closes the hash tag, then limitSuffix.
func limitTail(l sluice.Limit) string { return "}" + limitSuffix(l) }

// limitSuffix is the part of the key after the identity (Key layout), the Limit exactly
// as given; a calendar limit's is ":calendar_month:<rate>:<zone>:<anchor>".
func limitSuffix(l sluice.Limit) string {
	if l.Algorithm == sluice.Concurrency { // ":concurrency:<rate>:<lease µs>:0"
		return ":" + l.Algorithm.String() + ":" + strconv.FormatInt(l.Rate, 10) + ":" +
			strconv.FormatInt(l.Lease.Microseconds(), 10) + ":0"
	}
	if c := l.Calendar; !c.IsZero() {
		return ":" + c.Unit.String() + ":" + strconv.FormatInt(l.Rate, 10) + ":" + c.Zone.String() + ":" + strconv.Itoa(c.Anchor)
	}
	head := ":"
	switch l.Algorithm {
	case sluice.GCRA, sluice.TokenBucket, sluice.LeakyBucket:
		head = ":bucket:"
	}
	return head + l.Algorithm.String() + ":" + strconv.FormatInt(l.Rate, 10) + ":" +
		strconv.FormatInt(l.Period.Microseconds(), 10) + ":" + strconv.FormatInt(l.Burst, 10)
}
