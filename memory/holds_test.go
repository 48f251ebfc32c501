package memory

import (
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
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
	if keyLen(rekeying) <= 1<<16 { // store.MaxKeyLen
		t.Fatalf("rekeying's length %d could match a real key", keyLen(rekeying))
	}
}

// TestSameLengthRekeyRefusesAStaleReader replays a lock-free reader that read a slot's
// meta word, after which the lock's holder replaced the slot's emptied state in place
// with a key of the same length and tag (gcraClass.place), and the reader read the new
// key's pointer before the new meta word. setKey does not mark a change that keeps the
// length, so holds pairs the old meta word with the new key: it may compare the new
// key's bytes, which are exactly len(key) long, and match, but the decider must then
// refuse the slot, whose control word is already of the next generation.
func TestSameLengthRekeyRefusesAStaleReader(t *testing.T) {
	s, clk := newTestStore(t, WithShards(1))
	g := newGCRAClass(s, algo.ParamsOf(sluice.PerSecond(10)), 0, new(atomic.Bool))
	old, key := strings.Clone("key-a"), strings.Clone("key-b")
	m := uint64(1)<<genShift | gmeta(old, 7<<32) // key's tag and length too
	now := clk.Micros()
	var e gslot
	e.setKey(unsafe.StringData(old), m)
	e.ctl.Store(int64(m)&genMask | now)
	read := e.meta.Load() // the reader's first load
	// place, up to the pointer's store inside setKey: the new generation's control word,
	// then the pointer, with the meta word not yet written.
	next := (m>>genShift+1)<<genShift | m&keyMask
	e.ctl.Store(int64(next)&genMask | now)
	e.key.Store(unsafe.StringData(key))
	if !e.holds(read, key) {
		t.Fatal("the replay does not pair the old meta word with the new key")
	}
	if _, ok := g.fast(&e.ctl, read, now, 1); ok {
		t.Fatal("a reader holding the old meta word decided on the new key's state")
	}
	if got := e.ctl.Load(); got != int64(next)&genMask|now {
		t.Fatalf("the refused reader wrote the control word: %#x", got)
	}
	e.meta.Store(next) // setKey's last store
	if e.holds(read, key) || e.holds(read, old) {
		t.Fatal("holds matched a meta word the slot no longer has")
	}
	if _, ok := g.fast(&e.ctl, next, now, 1); !ok {
		t.Fatal("a current reader gave up")
	}
}
