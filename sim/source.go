package sim

import "container/heap"

// source yields a run's requests in time order and hears each decision.
type source interface {
	next() (Arrival, bool)
	// result reports the decision on the arrival next returned last.
	result(a Arrival, allowed bool, retryAfter int64)
}

// openLoop replays fixed arrivals whatever the decisions.
type openLoop struct {
	a []Arrival
	i int
}

func (s *openLoop) next() (Arrival, bool) {
	if s.i == len(s.a) {
		return Arrival{}, false
	}
	s.i++
	return s.a[s.i-1], true
}

func (s *openLoop) result(Arrival, bool, int64) {}

// retryClients makes each key a client that sends its demand one request at a time and
// honours Retry-After: a denied request is sent again at exactly now+RetryAfter, and the
// client's later requests queue behind it. Requests that would be sent at or after end are
// dropped.
type retryClients struct {
	demand  []Arrival
	i       int
	end     int64
	pending [][]int64   // per key: the demand times not yet admitted, oldest first
	ready   []int64     // per key: the earliest time the client may send again
	due     queue[send] // keys with pending demand, by the time they send next
}

func newRetryClients(demand []Arrival, keys int, end int64) *retryClients {
	return &retryClients{demand: demand, end: end, pending: make([][]int64, keys), ready: make([]int64, keys),
		due: queue[send]{less: sendsFirst}}
}

func (s *retryClients) next() (Arrival, bool) {
	for s.i < len(s.demand) && (s.due.Len() == 0 || s.demand[s.i].At <= s.due.s[0].at) {
		a := s.demand[s.i]
		s.i++
		if len(s.pending[a.Key]) == 0 {
			heap.Push(&s.due, send{at: max(a.At, s.ready[a.Key]), key: a.Key})
		}
		s.pending[a.Key] = append(s.pending[a.Key], a.At)
	}
	if s.due.Len() == 0 {
		return Arrival{}, false
	}
	next := heap.Pop(&s.due).(send)
	if next.at >= s.end {
		return Arrival{}, false // every later send is later still
	}
	return Arrival{At: next.at, Key: next.key}, true
}

func (s *retryClients) result(a Arrival, allowed bool, retryAfter int64) {
	k := a.Key
	if allowed {
		s.pending[k] = s.pending[k][1:]
		s.ready[k] = a.At
	} else {
		s.ready[k] = a.At + retryAfter
	}
	if len(s.pending[k]) > 0 {
		heap.Push(&s.due, send{at: max(s.pending[k][0], s.ready[k]), key: k})
	}
}

type send struct {
	at  int64
	key int32
}

// sendsFirst orders sends by time, then key, so that runs are deterministic.
func sendsFirst(x, y send) bool { return x.at < y.at || x.at == y.at && x.key < y.key }
