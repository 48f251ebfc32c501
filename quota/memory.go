package quota

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Memory is a Store in process memory, for one instance. It is safe for concurrent use.
// A bucket whose clients have all expired is forgotten (a few at each report), so its
// memory is bounded by the buckets reported on within one TTL.
type Memory struct {
	now     func() time.Time
	mu      sync.Mutex
	buckets map[string]*bucket
	byExp   bucketHeap // buckets by the expiry of their newest client
}

// NewMemory returns an empty Memory store reading time from now (time.Now when nil).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, buckets: map[string]*bucket{}}
}

type bucket struct {
	key              string
	clients          map[string]*client
	byExp            clientHeap
	weight, assigned int64 // sums over clients
	expires          int64 // the latest client expiry, µs
	index            int   // in Memory.byExp
}

type client struct {
	id                        string
	weight, assigned, expires int64
	index                     int // in bucket.byExp
}

// Rebalance implements Store.
func (m *Memory) Rebalance(_ context.Context, reps []Report, out []Assignment) error {
	now := micros(m.now())
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range reps {
		out[i] = m.rebalance(&reps[i], now)
	}
	// Forget a few buckets nobody reported on within their TTL.
	for range 2 {
		if len(m.byExp) == 0 || m.byExp[0].expires > now {
			break
		}
		b := heap.Pop(&m.byExp).(*bucket)
		delete(m.buckets, b.key)
	}
	return nil
}

// rebalance is rebalance.lua in Go: drop expired clients, replace the reporter's entry,
// compute its Share.
func (m *Memory) rebalance(r *Report, now int64) Assignment {
	b := m.buckets[r.Key]
	if b == nil {
		b = &bucket{key: r.Key, clients: map[string]*client{}}
		m.buckets[r.Key] = b
		b.expires = now
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
	}
	n := int64(len(b.clients))
	c := b.clients[r.Client]
	if c != nil {
		b.weight -= c.weight
		b.assigned -= c.assigned
	} else {
		n++
		if n > MaxClients {
			return Assignment{Rate: -1, Clients: n - 1, Assigned: b.assigned}
		}
		c = &client{id: r.Client}
		b.clients[r.Client] = c
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

type clientHeap []*client

func (h clientHeap) Len() int           { return len(h) }
func (h clientHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h clientHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *clientHeap) Push(x any) { c := x.(*client); c.index = len(*h); *h = append(*h, c) }
func (h *clientHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}

type bucketHeap []*bucket

func (h bucketHeap) Len() int           { return len(h) }
func (h bucketHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h bucketHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *bucketHeap) Push(x any) { b := x.(*bucket); b.index = len(*h); *h = append(*h, b) }
func (h *bucketHeap) Pop() any {
	old := *h
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return b
}
