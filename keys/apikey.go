package keys

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"
)

// Encoding is how a Hasher writes the 32-byte MAC.
type Encoding uint8

const (
	Hex       Encoding = iota // 64 lower-case hexadecimal digits
	Base64URL                 // 43 characters of unpadded base64url (RFC 4648 §5)
)

// MinSecretLen is the shortest secret NewHasher accepts, in bytes (32 are recommended).
const MinSecretLen = 16

// ErrWeakSecret is returned by NewHasher for a secret shorter than MinSecretLen.
var ErrWeakSecret = errors.New("keys: API key secret too short")

// Hasher turns raw API keys into identifiers safe to store and log: HMAC-SHA256(secret,
// key). It is safe for concurrent use. The zero Hasher hashes nothing (Sum returns "").
type Hasher struct {
	secret []byte
	enc    Encoding
	pool   sync.Pool // of hash.Hash, keyed with secret
}

// NewHasher returns a Hasher keyed with a copy of secret, of at least MinSecretLen bytes;
// processes sharing a store must share it.
func NewHasher(secret []byte, enc Encoding) (*Hasher, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d", ErrWeakSecret, len(secret), MinSecretLen)
	}
	if enc != Hex && enc != Base64URL {
		return nil, fmt.Errorf("keys: unknown encoding %d", enc)
	}
	h := &Hasher{secret: append([]byte(nil), secret...), enc: enc}
	h.pool.New = func() any { return hmac.New(sha256.New, h.secret) }
	return h, nil
}

// Sum returns the encoded HMAC-SHA256 of apiKey, retaining nothing else derived from it.
func (h *Hasher) Sum(apiKey string) string {
	if h == nil || len(h.secret) == 0 {
		return ""
	}
	m := h.pool.Get().(hash.Hash) // reset, as every Put below leaves it
	m.Write([]byte(apiKey))
	var sum [sha256.Size]byte
	m.Sum(sum[:0])
	m.Reset() // leave no state derived from the key in the pool
	h.pool.Put(m)
	if h.enc == Base64URL {
		return base64.RawURLEncoding.EncodeToString(sum[:])
	}
	return hex.EncodeToString(sum[:])
}

// Identity returns the APIKey Identity of apiKey, its MAC. An empty apiKey and a zero
// Hasher give the zero Identity.
func (h *Hasher) Identity(apiKey string) Identity {
	if apiKey == "" {
		return Identity{}
	}
	if sum := h.Sum(apiKey); sum != "" {
		return Identity{Kind: APIKey, ID: sum}
	}
	return Identity{}
}
