package quota

import (
	"container/heap"
	"context"
	"slices"
	"sync"
	"time"
)

// Memory is a Store in process memory, for one instance. It is safe for concurrent use.
// A bucket whose clients have all expired is forgotten (a few at each report), so its
// memory is bounded by the buckets reported on within one TTL, and by WithMaxClients.
type Memory struct {
	now        func() time.Time
	maxClients int
	mu         sync.Mutex
	buckets    map[string]*bucket
	byExp      expiryHeap[*bucket] // buckets by the expiry of their newest client
	clients    int                 // (bucket, client) entries held
}

// MemoryOption configures a Memory store.
type MemoryOption func(*Memory)

// WithMaxClients bounds the (bucket, client) entries a Memory store holds, over every
// bucket (0, the default: no bound). A report that would add one more, expired entries
// dropped first, is answered as a full bucket is (Assignment.Rate -1).
func WithMaxClients(n int) MemoryOption { return func(m *Memory) { m.maxClients = n } }

// NewMemory returns an empty Memory store reading time from now (time.Now when nil).
func NewMemory(now func() time.Time, opts ...MemoryOption) *Memory {
	if now == nil {
		now = time.Now
	}
	m := &Memory{now: now, buckets: map[string]*bucket{}}
	for _, o := range opts {
		o(m)
	}
	return m
}

type bucket struct {
	key              string
	clients          map[string]*client
	byExp            expiryHeap[*client]
	weight, assigned int64 // sums over clients
	expiry                 // the latest client expiry, its place in Memory.byExp
}

type client struct {
	id               string
	weight, assigned int64
	expiry           // its place in bucket.byExp
}

// Rebalance implements Store.
func (m *Memory) Rebalance(_ context.Context, reps []Report, out []Assignment) error {
	now := m.now().UnixMicro()
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range reps {
		out[i] = m.rebalance(&reps[i], now)
	}
	m.forget(now, 2)
	return nil
}

// forget drops at most n buckets whose clients have all expired.
func (m *Memory) forget(now int64, n int) {
	for range n {
		if len(m.byExp) == 0 || m.byExp[0].expires > now {
			break
		}
		b := heap.Pop(&m.byExp).(*bucket)
		delete(m.buckets, b.key)
		m.clients -= len(b.clients)
	}
}

// full reports whether one more client entry would exceed WithMaxClients, after dropping
// a few expired buckets when sweep is set (never while a bucket is being updated: it
// could be one of them).
func (m *Memory) full(now int64, sweep bool) bool {
	if m.maxClients <= 0 || m.clients < m.maxClients {
		return false
	}
	if sweep {
		m.forget(now, expiredPerCall)
	}
	return m.clients >= m.maxClients
}

// rebalance is rebalance.lua in Go: drop expired clients, replace the reporter's entry,
// compute its Share.
func (m *Memory) rebalance(r *Report, now int64) Assignment {
	b := m.buckets[r.Key]
	if b == nil {
		if m.full(now, true) {
			return Assignment{Rate: -1}
		}
		b = &bucket{key: r.Key, clients: map[string]*client{}, expiry: expiry{expires: now}}
		m.buckets[r.Key] = b
		heap.Push(&m.byExp, b)
	}
	for range expiredPerCall {
		if len(b.byExp) == 0 || b.byExp[0].expires > now {
			break
		}
		c := heap.Pop(&b.byExp).(*client)
		b.weight -= c.weight
		b.assigned -= c.assigned
		delete(b.clients, c.id)
		m.clients--
	}
	n := int64(len(b.clients))
	c := b.clients[r.Client]
	if c != nil {
		b.weight -= c.weight
		b.assigned -= c.assigned
	} else {
		n++
		if n > MaxClients || m.full(now, false) {
			return Assignment{Rate: -1, Clients: n - 1, Assigned: b.assigned}
		}
		c = &client{id: r.Client}
		b.clients[r.Client] = c
		m.clients++
		heap.Push(&b.byExp, c)
	}
	b.weight += r.Weight
	share := Share(r.Rate, n, r.Weight, b.weight, b.assigned)
	b.assigned += share
	c.weight, c.assigned, c.expires = r.Weight, share, now+r.TTL.Microseconds()
	heap.Fix(&b.byExp, c.index)
	if c.expires > b.expires {
		b.expires = c.expires
		heap.Fix(&m.byExp, b.index)
	}
	return Assignment{Rate: share, Clients: n, Assigned: b.assigned}
}

// Buckets returns the number of buckets kept.
func (m *Memory) Buckets() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.buckets)
}

// expiry is what an expiryHeap orders by, and where it keeps its element.
type expiry struct {
	expires int64 // µs
	index   int   // in the heap
}

func (e *expiry) at() *expiry { return e }

// expiryHeap orders its elements by expiry, soonest first (for container/heap).
type expiryHeap[T interface{ at() *expiry }] []T

func (h expiryHeap[T]) Len() int           { return len(h) }
func (h expiryHeap[T]) Less(i, j int) bool { return h[i].at().expires < h[j].at().expires }
func (h expiryHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].at().index, h[j].at().index = i, j
}
func (h *expiryHeap[T]) Push(x any) { t := x.(T); t.at().index = len(*h); *h = append(*h, t) }
func (h *expiryHeap[T]) Pop() any {
	t := (*h)[len(*h)-1]
	*h = slices.Delete(*h, len(*h)-1, len(*h)) // clears the vacated slot
	return t
}
