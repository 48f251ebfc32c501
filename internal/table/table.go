// Package table is the open-addressing hash table of string keys that the stores keep
// their per-key state in, and the rules every such table in sluice follows.
//
// A key's position comes from its 32-bit tag (the high half of its 64-bit hash, kept in
// its slot): [Home] multiplies the tag by the capacity rather than masking it, so a
// capacity may be any integer. Probing is linear, wrapping at the end.
//
// Deletion is backward shift, with no tombstones: deleting an entry leaves a hole, and
// each later entry of the hole's probe run that may sit there ([Fills]) moves back into
// it and leaves the next hole, until an empty slot ends the run. So every entry stays
// reachable from its home without crossing an empty slot, and a lookup stops at the first
// empty slot. memory's lock-free tables apply the same rule through [Home] and [Fills];
// they only tombstone a slot for the time of the move, since readers without the lock may
// be holding its index.
package table

import "unsafe"

// Home is the position a key with tag t prefers in a table of c slots.
func Home(t uint32, c int) int { return int(uint64(t) * uint64(c) >> 32) }

// Tag is the tag of a key whose 64-bit hash is h: its high half.
func Tag(h uint64) uint32 { return uint32(h >> 32) }

// Fills reports whether the entry at position j, whose home is k, may move back into the
// hole at position i of its probe run: whether k does not lie cyclically in (i, j]. An
// entry whose home lies there would end up before its home, where no lookup reaches it.
func Fills(i, j, k int) bool {
	if j > i {
		return k <= i || k > j
	}
	return k <= i && k > j
}

// Slot is one entry: its key, held as a pointer and a length rather than a string header
// so that the tag fits beside it (a probe compares length and tag inside the slot and
// reads the key's bytes only on a likely match), and its value V. A slot of an 8-byte V
// is 24 bytes. A nil pointer marks an empty slot (keys are never empty).
type Slot[V any] struct {
	ptr  *byte
	klen uint32
	tag  uint32
	V    V
}

// Key is the slot's key; "" for an empty slot.
func (e *Slot[V]) Key() string { return unsafe.String(e.ptr, int(e.klen)) }

// Used reports whether the slot holds a key.
func (e *Slot[V]) Used() bool { return e.ptr != nil }

// Table maps non-empty string keys to values of type V. It keeps a reference to each
// key's bytes, so a key must not be modified while it is in the table. The zero Table is
// empty and ready to use. It grows by a third above 80% full, which leaves it 60% full,
// so at any size a slot costs at most 1/0.6 of its bytes. A Table is not safe for
// concurrent use.
type Table[V any] struct {
	slots []Slot[V]
	n     int
}

const (
	maxLoadNum, maxLoadDen = 4, 5 // grow above 80% full
	minCap                 = 8
)

// Len is the number of keys held.
func (t *Table[V]) Len() int { return t.n }

// Cap is the number of slots.
func (t *Table[V]) Cap() int { return len(t.slots) }

// At returns slot i, 0 <= i < Cap(). A Delete, or an Insert or Add that adds a key, may
// move every slot.
func (t *Table[V]) At(i int) *Slot[V] { return &t.slots[i] }

// Full reports whether the next Insert of an absent key grows the table.
func (t *Table[V]) Full() bool { return (t.n+1)*maxLoadDen > len(t.slots)*maxLoadNum }

// Find returns the position of key, whose hash is h, or -1.
func (t *Table[V]) Find(key string, h uint64) int {
	c := len(t.slots)
	if c == 0 {
		return -1
	}
	tag := Tag(h)
	for i := Home(tag, c); ; {
		e := &t.slots[i]
		if e.ptr == nil {
			return -1
		}
		if e.tag == tag && e.klen == uint32(len(key)) && e.Key() == key {
			return i
		}
		if i++; i == c {
			i = 0
		}
	}
}

// Insert adds key, whose hash is h and which must be absent and not empty, with value v,
// and returns its position.
func (t *Table[V]) Insert(key string, h uint64, v V) int {
	if t.Full() {
		t.resize(max(minCap, len(t.slots)+len(t.slots)/3+1))
	}
	c, tag := len(t.slots), Tag(h)
	i := Home(tag, c)
	for t.slots[i].ptr != nil {
		if i++; i == c {
			i = 0
		}
	}
	t.slots[i] = Slot[V]{ptr: unsafe.StringData(key), klen: uint32(len(key)), tag: tag, V: v}
	t.n++
	return i
}

// Add returns the position of key, whose hash is h and which must not be empty,
// inserting it with value v when it is absent; added reports whether it did. It probes
// once where Find and then Insert probe twice (but for an Insert that grows the table).
func (t *Table[V]) Add(key string, h uint64, v V) (i int, added bool) {
	c, tag := len(t.slots), Tag(h)
	if c == 0 || t.Full() {
		if i = t.Find(key, h); i >= 0 {
			return i, false
		}
		return t.Insert(key, h, v), true
	}
	for i = Home(tag, c); ; {
		e := &t.slots[i]
		if e.ptr == nil {
			*e = Slot[V]{ptr: unsafe.StringData(key), klen: uint32(len(key)), tag: tag, V: v}
			t.n++
			return i, true
		}
		if e.tag == tag && e.klen == uint32(len(key)) && e.Key() == key {
			return i, false
		}
		if i++; i == c {
			i = 0
		}
	}
}

// Delete removes the entry at position i, which must hold one, by backward shift (the
// package doc): a later entry may move into i.
func (t *Table[V]) Delete(i int) {
	c := len(t.slots)
	for j := i; ; {
		if j++; j == c {
			j = 0
		}
		e := &t.slots[j]
		if e.ptr == nil {
			break
		}
		if Fills(i, j, Home(e.tag, c)) {
			t.slots[i] = *e
			i = j
		}
	}
	t.slots[i] = Slot[V]{}
	t.n--
}

// Shrink makes the table smaller when it is less than a fifth full and larger than 64
// slots, so that a burst of keys that went away does not pin its peak memory.
func (t *Table[V]) Shrink() {
	if len(t.slots) > 64 && t.n*5 < len(t.slots) {
		t.resize(max(minCap, t.n*5/3+1))
	}
}

// Reset empties the table and sizes it for n keys (Insert does not grow it before the
// n+1st), reusing its slots' memory when that is large enough. Only the slots in use
// before are cleared, so a table reused for calls of varying sizes pays for each call's
// own size; Reset(0) after a use drops the references to its keys.
func (t *Table[V]) Reset(n int) {
	clear(t.slots)
	want := max(minCap, n*5/3+1)
	if cap(t.slots) >= want {
		t.slots = t.slots[:want] // the slots past len are zero (no method writes them)
	} else {
		t.slots = make([]Slot[V], want)
	}
	t.n = 0
}

// resize moves every entry into a table of the given capacity.
func (t *Table[V]) resize(capacity int) {
	old := t.slots
	t.slots = make([]Slot[V], capacity)
	for k := range old {
		e := &old[k]
		if e.ptr == nil {
			continue
		}
		i := Home(e.tag, capacity)
		for t.slots[i].ptr != nil {
			if i++; i == capacity {
				i = 0
			}
		}
		t.slots[i] = *e
	}
}
