package memory

import "unsafe"

// slot is one key's entry. The key is held as a pointer and a length rather than a string
// header so that a 32-bit hash tag fits beside it: a probe compares length and tag inside
// the slot and touches the key's bytes only on a likely match. A GCRA slot is 24 bytes.
// A nil ptr marks an empty slot (keys are never empty).
type slot[S any] struct {
	ptr  *byte
	klen uint32
	tag  uint32
	s    S
}

func (e *slot[S]) key() string { return unsafe.String(e.ptr, int(e.klen)) }

// table is an open-addressing hash table with linear probing and backward-shift deletion
// (no tombstones). Its capacity is any integer (positions are chosen by multiplying the
// hash, not masking it), which lets it grow by a third rather than double: after growing it
// is 60% full and it grows at 80%, so at any size a slot costs at most 1/0.6 of its bytes.
type table[S any] struct {
	slots []slot[S]
	n     int
}

const (
	maxLoadNum, maxLoadDen = 4, 5 // grow above 80% full
	minCap                 = 8
)

// home is the position a hash prefers in a table of the given capacity.
func home(h uint64, capacity int) int {
	return int((h & 0xffffffff) * uint64(capacity) >> 32)
}

// find returns the index of key's slot, or -1.
func (t *table[S]) find(key string, h uint64, tag uint32) int {
	c := len(t.slots)
	if c == 0 {
		return -1
	}
	for i := home(h, c); ; {
		e := &t.slots[i]
		if e.ptr == nil {
			return -1
		}
		if e.tag == tag && e.klen == uint32(len(key)) && e.key() == key {
			return i
		}
		if i++; i == c {
			i = 0
		}
	}
}

// insert adds key (known to be absent) with state s and returns its index. The table keeps
// a reference to key's bytes.
func (t *table[S]) insert(key string, h uint64, tag uint32, s S, hash func(string) uint64) int {
	if (t.n+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t.resize(max(minCap, len(t.slots)+len(t.slots)/3+1), hash)
	}
	c := len(t.slots)
	i := home(h, c)
	for t.slots[i].ptr != nil {
		if i++; i == c {
			i = 0
		}
	}
	t.slots[i] = slot[S]{ptr: unsafe.StringData(key), klen: uint32(len(key)), tag: tag, s: s}
	t.n++
	return i
}

// remove deletes the entry at index i, shifting later entries of its probe run back so that
// every entry stays reachable from its home position.
func (t *table[S]) remove(i int, hash func(string) uint64) {
	c := len(t.slots)
	j := i
	for {
		if j++; j == c {
			j = 0
		}
		e := &t.slots[j]
		if e.ptr == nil {
			break
		}
		k := home(hash(e.key()), c)
		// Move e back to i unless its home lies cyclically in (i, j].
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			t.slots[i] = *e
			i = j
		}
	}
	t.slots[i] = slot[S]{}
	t.n--
}

// resize rehashes every entry into a table of the given capacity.
func (t *table[S]) resize(capacity int, hash func(string) uint64) {
	old := t.slots
	t.slots = make([]slot[S], capacity)
	for k := range old {
		e := &old[k]
		if e.ptr == nil {
			continue
		}
		i := home(hash(e.key()), capacity)
		for t.slots[i].ptr != nil {
			if i++; i == capacity {
				i = 0
			}
		}
		t.slots[i] = *e
	}
}

// shrink halves the table when it is less than a fifth full, so a burst of keys that went
// idle does not pin its peak memory.
func (t *table[S]) shrink(hash func(string) uint64) {
	if len(t.slots) > 64 && t.n*5 < len(t.slots) {
		t.resize(max(minCap, t.n*5/3+1), hash)
	}
}
