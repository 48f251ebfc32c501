package keys

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestHasherSum(t *testing.T) {
	// RFC 4231 test case 2 uses a 4-byte key; test case 1 (20 × 0x0b, "Hi There") fits
	// MinSecretLen.
	secret := bytes.Repeat([]byte{0x0b}, 20)
	tests := []struct {
		enc  Encoding
		want string
	}{
		{Hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{Base64URL, "sDRMYdjbOFNcqK_OrwvxK4gdwgDJgz2nJuk3bC4yz_c"},
	}
	for _, tt := range tests {
		h, err := NewHasher(secret, tt.enc)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Sum("Hi There"); got != tt.want {
			t.Errorf("Sum(enc %d) = %q, want %q", tt.enc, got, tt.want)
		}
		// Pooled hashes must not carry state between calls.
		if got := h.Sum("Hi There"); got != tt.want {
			t.Errorf("second Sum(enc %d) = %q, want %q", tt.enc, got, tt.want)
		}
		id := h.Identity("Hi There")
		if id != (Identity{Kind: APIKey, ID: tt.want}) {
			t.Errorf("Identity = %+v", id)
		}
		if strings.Contains(id.String(), "Hi There") {
			t.Errorf("identity %q contains the raw key", id)
		}
	}
}

func TestHasherSecret(t *testing.T) {
	if _, err := NewHasher(make([]byte, MinSecretLen-1), Hex); !errors.Is(err, ErrWeakSecret) {
		t.Errorf("short secret: err = %v, want ErrWeakSecret", err)
	}
	if _, err := NewHasher(make([]byte, MinSecretLen), Encoding(9)); err == nil {
		t.Error("unknown encoding accepted")
	}
	secret := []byte("0123456789abcdef0123456789abcdef")
	a, _ := NewHasher(secret, Hex)
	secret[0] = 'X' // NewHasher must have copied the secret
	b, _ := NewHasher(secret, Hex)
	if a.Sum("k") == b.Sum("k") {
		t.Error("different secrets give the same MAC, or the secret was not copied")
	}
	if a.Sum("k1") == a.Sum("k2") {
		t.Error("different keys give the same MAC")
	}
}

func TestZeroHasherFailsClosed(t *testing.T) {
	var h Hasher
	var nilh *Hasher
	if h.Sum("k") != "" || nilh.Sum("k") != "" {
		t.Error("a Hasher without a secret produced a MAC")
	}
	if !h.Identity("k").IsZero() || !nilh.Identity("k").IsZero() {
		t.Error("a Hasher without a secret produced an identity")
	}
	good, _ := NewHasher(make([]byte, 32), Hex)
	if !good.Identity("").IsZero() {
		t.Error("an empty API key produced an identity")
	}
}

func TestHasherConcurrent(t *testing.T) {
	h, _ := NewHasher(make([]byte, 32), Base64URL)
	want := h.Sum("key-7")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 200 {
				if g%2 == 0 {
					h.Sum("other")
				} else if got := h.Sum("key-7"); got != want {
					t.Errorf("concurrent Sum = %q, want %q", got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkHasherSum(b *testing.B) {
	h, _ := NewHasher(make([]byte, 32), Hex)
	b.ReportAllocs()
	for b.Loop() {
		h.Sum("sk_live_0123456789abcdef")
	}
}
