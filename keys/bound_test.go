package keys

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/store"
)

func TestBound(t *testing.T) {
	short := strings.Repeat("a", MaxStoreKeyLen)
	if got := Bound(short); got != short {
		t.Errorf("a key of MaxStoreKeyLen bytes changed: %d bytes", len(got))
	}
	long := strings.Repeat("%=/{}:", 8<<10) // 48 KiB, as a client can send it
	b := Bound(long)
	if len(b) != MaxStoreKeyLen+65 || !strings.HasPrefix(b, long[:MaxStoreKeyLen]) {
		t.Fatalf("Bound(48 KiB) = %d bytes", len(b))
	}
	if err := store.CheckKey(b); err != nil || 3*len(b) > store.MaxKeyLen {
		t.Errorf("a bound key (%d bytes, %d escaped at worst) is not a valid store key: %v", len(b), 3*len(b), err)
	}
	if Bound(b) == b {
		t.Error("a digest form is longer than the bound and must itself be digested")
	}
	// Two long keys that share the kept prefix stay apart.
	if Bound(long+"x") == Bound(long+"y") {
		t.Error("long keys differing after the prefix share a key")
	}
	// A short key can never equal a digest form: they differ in length.
	fake := long[:MaxStoreKeyLen-65] + "#" + strings.Repeat("0", 64)
	if len(Bound(fake)) > MaxStoreKeyLen {
		t.Error("a short key was digested")
	}
	if Bound(fake) == Bound(long) {
		t.Error("a short key that looks like a digest collides with a long key")
	}
}

func FuzzBound(f *testing.F) {
	f.Add("a", "b")
	f.Add(strings.Repeat("x", MaxStoreKeyLen+1), strings.Repeat("x", MaxStoreKeyLen+2))
	f.Fuzz(func(t *testing.T, a, b string) {
		ba, bb := Bound(a), Bound(b)
		if (ba == bb) != (a == b) {
			t.Fatalf("Bound(%d bytes) == Bound(%d bytes): %v, keys equal: %v", len(a), len(b), ba == bb, a == b)
		}
		if len(ba) > MaxStoreKeyLen+65 {
			t.Fatalf("Bound returned %d bytes", len(ba))
		}
	})
}
