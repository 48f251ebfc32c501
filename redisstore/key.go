package redisstore

import (
	"strconv"
	"strings"

	"github.com/sluicehq/sluice"
)

// DefaultPrefix starts every Redis key the store writes, unless WithPrefix says otherwise.
const DefaultPrefix = "sluice:"

// Key layout
//
//	<prefix>{<escaped identity>}:<algorithm>:<rate>:<period µs>:<burst>
//	<prefix>{<escaped identity>}:bucket:<algorithm>:<rate>:<period µs>:<burst>
//
// the second for GCRA, TokenBucket and LeakyBucket limits, for example
// "sluice:{user:42}:bucket:gcra:10:1000000:0". The identity sits inside a Redis Cluster
// hash tag, so every key of one identity (one per Limit) is in the same slot and a
// multi-limit decision on it is one script call. The suffix is the whole Limit, because a
// store keeps separate state per (key, Limit): a key moved to another Limit starts afresh
// while its old state expires.
//
// The word "bucket" marks the state of the one bucket machine (algo.GCRA, a TAT). Keys
// ending ":gcra:...", ":token_bucket:..." or ":leaky_bucket:..." hold the states of the
// three machines those names were before (a TAT, a credit and its time, a level and its
// time), which read as a TAT would be other buckets: the store never reads them. They
// expire by their TTL, and their identities start afresh with a full bucket, as after a
// change of tier (docs/redis.md).
//
// Escaping keeps the hash tag and the layout unambiguous whatever bytes the identity holds:
// '%' becomes "%25", '{' "%7B" and '}' "%7D". The escaped identity then contains no '}', so
// the hash tag always spans exactly the whole identity (an identity with '}' cannot end it
// early and move the key to another slot), and since '%' only ever starts an escape the
// mapping is injective: two identities never share a key. ':' and arbitrary bytes (invalid
// UTF-8, NUL) need no escaping: Redis keys are binary-safe and the suffix follows the
// closing '}'.

// escapeIdentity applies the escaping above. Identities without '%', '{' or '}' are
// returned as they are.
func escapeIdentity(id string) string {
	if plain(id) == len(id) {
		return id
	}
	return string(appendEscaped(make([]byte, 0, len(id)+16), id))
}

// plain returns the index of the first byte of id that escaping changes, or len(id).
// Short identities are scanned byte by byte; longer ones with three strings.IndexByte
// (vector instructions), which unlike strings.ContainsAny builds no byte set per call.
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

// idSlot is the cluster slot of every key of identity id: the CRC16 of its hash tag, the
// escaped identity (never empty, as an identity is not).
func idSlot(id string) uint16 {
	return crc16(escapeIdentity(id)) % 16384
}

// limitTail ends l's keys: the '}' that closes the identity's hash tag, then
// limitSuffix.
func limitTail(l sluice.Limit) string { return "}" + limitSuffix(l) }

// limitSuffix is the part of the key after the identity: ":<algorithm>:<rate>:<period
// µs>:<burst>", with ":bucket" before it for the bucket machine (see Key layout), the Limit
// exactly as given (Burst 0 stays 0), so that two Limits share state only when they are
// equal, as in every store.
//
// A calendar limit's suffix is ":calendar_month:<rate>:<zone>:<anchor>" instead.
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

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
