package memory

import (
	"strings"
	"testing"
	"unsafe"
)

// TestHoldsNeverReadsAnotherKeysBytes replays a lock-free reader that read a slot's meta
// word for a long key, after which the lock's holder gave the slot a shorter key: the
// reader must answer false without comparing len(long) bytes at the short key's address
// (under -race, checkptr aborts on such a read; without it, it reads past the key).
func TestHoldsNeverReadsAnotherKeysBytes(t *testing.T) {
	long := strings.Repeat("k", 40)
	short := strings.Clone("k")
	var h lhdr
	m := uint64(1)<<genShift | gmeta(long, 7<<32)
	h.setKey(unsafe.StringData(long), m)
	if !h.holds(m, long) {
		t.Fatal("a slot does not hold the key it was given")
	}
	read := h.meta.Load() // the reader's first load
	h.setKey(unsafe.StringData(short), uint64(2)<<genShift|gmeta(short, 7<<32))
	if h.holds(read, long) {
		t.Fatal("holds matched a key against a slot rekeyed since its meta was read")
	}
	if got := h.meta.Load() & rekeying; got == rekeying {
		t.Fatal("setKey left the slot's meta marked as rekeying")
	}
	if keyLen(rekeying) <= 1<<16 { // sluice.MaxKeyLen
		t.Fatalf("rekeying's length %d could match a real key", keyLen(rekeying))
	}
}
