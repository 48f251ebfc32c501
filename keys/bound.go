package keys

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxStoreKeyLen is the longest store key Bound returns unchanged. Longer keys (a client
// can make one from a header or an Envoy descriptor value) are replaced by a digest form
// of MaxStoreKeyLen+1+64 bytes, well under store.MaxKeyLen even after a store's escaping
// triples it, so no client-shaped key is ever refused by a store.
const MaxStoreKeyLen = 1024

// Bound returns the store key to use for key. A key of at most MaxStoreKeyLen bytes is
// returned as it is. A longer key becomes its first MaxStoreKeyLen bytes, '#', and the
// hexadecimal SHA-256 of the whole key.
//
// The encoding is injective (up to SHA-256 collisions): a key returned as it is has at most
// MaxStoreKeyLen bytes and a digest form always has more, so a short key that looks like a
// digest never meets the digest of a long one; two long keys share a form only if their
// SHA-256 sums are equal. The kept prefix leaves the key readable in logs and in the store.
func Bound(key string) string {
	if len(key) <= MaxStoreKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	b := make([]byte, 0, MaxStoreKeyLen+1+2*sha256.Size)
	b = append(b, key[:MaxStoreKeyLen]...)
	b = append(b, '#')
	b = hex.AppendEncode(b, sum[:])
	return string(b)
}
