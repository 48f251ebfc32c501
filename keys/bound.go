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
	return key[:MaxStoreKeyLen] + "#" + hex.EncodeToString(sum[:])
}
