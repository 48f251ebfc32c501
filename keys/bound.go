package keys

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxStoreKeyLen is the longest store key Bound returns unchanged. Its digest form is
// well under store.MaxKeyLen even after a store's escaping triples it.
const MaxStoreKeyLen = 1024

// Bound returns the store key for key: key itself up to MaxStoreKeyLen bytes, else its
// first MaxStoreKeyLen bytes, '#' and the hex SHA-256 of the whole key. It is injective
// up to SHA-256 collisions, since a digest form is always longer than MaxStoreKeyLen.
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
