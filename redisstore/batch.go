package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/internal/table"
	"github.com/sluicehq/sluice/store"
)

// maxCallKeyBytes bounds the key bytes one script call carries, so that a batch of long
// identities (up to store.MaxKeyLen each) stays a reasonable command.
const maxCallKeyBytes = 1 << 20

// item is one request in a script call. Its Redis key (Store.appendKey) is built only
// when the call is, into a buffer the batch reuses.
type item struct {
	id    string // the caller's key, the identity
	info  *limitInfo
	n     int64
	lease uint64 // Concurrency: the id of the lease the item takes if allowed
}

// newItem is the item of request key, n under the Limit of li; a Concurrency request of
// cost 1 draws its lease id.
func newItem(key string, li *limitInfo, n int64) item {
	it := item{id: key, info: li, n: n}
	if n > 0 && li.limit.Algorithm == sluice.Concurrency {
		it.lease = rand.Uint64N(store.MaxLeaseID) + 1
	}
	return it
}

// appendPacked appends the item's fields as the scripts read them: the limit's four
// (limitInfo.packed), a Concurrency limit's lease id in the place of burst, then n.
func (it *item) appendPacked(b []byte) []byte {
	if it.info.limit.Algorithm == sluice.Concurrency {
		b = append(b, it.info.packed[:24]...)
		b = appendFloat(b, int64(it.lease))
	} else {
		b = append(b, it.info.packed[:]...)
	}
	return appendFloat(b, it.n)
}

// result is o as the item's decision: an allowed Concurrency item holds its lease.
func (it *item) result(o algo.Outcome) algo.Outcome {
	if o.Allowed && it.lease != 0 {
		o.Lease = it.lease
	}
	return o
}

// call is one caller's decision (one item) or all-or-nothing group (several), waiting for
// a script call to carry it.
type call struct {
	ctx    context.Context
	items  []item
	res    []algo.Outcome
	err    error
	done   chan struct{} // receives once when res or err is set
	one    [1]item
	oneRes [1]algo.Outcome
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

func getCall(ctx context.Context) *call {
	c := callPool.Get().(*call)
	c.ctx = ctx
	return c
}

// putCall recycles c. Only the caller may do it, once the call has been answered: a call
// abandoned on a cancelled context is left to the garbage collector.
func putCall(c *call) {
	c.ctx, c.items, c.res, c.err = nil, nil, nil, nil
	c.one[0] = item{}
	callPool.Put(c)
}

// keyBytes is about the bytes of the call's Redis keys (escaping aside).
func (c *call) keyBytes() int {
	n := 0
	for _, it := range c.items {
		n += len(it.id) + len(it.info.tail)
	}
	return n
}

// submit queues c on its server's batcher and waits for the answer or for ctx to end. The
// caller never makes the script call itself: rueidis dials a broken connection inside Do
// without regard to the context, which could hold the caller past its deadline.
func (s *Store) submit(ctx context.Context, cn *conn, c *call) error {
	cn.batcherFor(s, c.items[0].id).enqueue(c)
	select {
	case <-c.done:
		if err := c.err; err != nil {
			putCall(c)
			return err
		}
		return nil
	case <-ctx.Done():
		// c stays with the batcher, which drops it unsent if it has not gone out yet.
		return fmt.Errorf("redisstore: %w", ctx.Err())
	}
}

// batcherFor returns the batcher for identity id's keys.
func (cn *conn) batcherFor(s *Store, id string) *batcher {
	if !cn.cluster {
		return cn.single
	}
	p := &cn.slots[idSlot(id)]
	if b := p.Load(); b != nil {
		return b
	}
	p.CompareAndSwap(nil, newBatcher(s, cn, s.conc))
	return p.Load()
}

// batcher coalesces the decisions bound for one server (one slot on a cluster): at most
// max script calls are in flight; decisions arriving meanwhile queue, and each call takes
// everything queued, up to the batch size.
type batcher struct {
	s   *Store
	cn  *conn
	max int

	mu      sync.Mutex
	queue   []*call
	running int
}

// keySets holds the tables [repeats] finds a key repeated within one script call in. The
// script keeps what it wrote to each key for a later request on the same key only when
// told to (ARGV[5]): repeated keys are rare outside hot keys.
var (
	keySets = sync.Pool{New: func() any { return new(table.Table[struct{}]) }}
	keySeed = maphash.MakeSeed()
)

// repeats reports whether keys holds a key twice.
func repeats(keys []string) bool {
	switch len(keys) {
	case 0, 1:
		return false
	case 2:
		return keys[0] == keys[1]
	}
	set := keySets.Get().(*table.Table[struct{}])
	set.Reset(len(keys))
	found := false
	for _, key := range keys {
		if _, added := set.Add(key, maphash.String(keySeed, key), struct{}{}); !added {
			found = true
			break
		}
	}
	set.Reset(0) // drops the references to the keys' bytes
	keySets.Put(set)
	return found
}

// minExtraCall is how many decisions must be waiting before a third (or later) call goes
// out while two are in flight: only then is Redis's cost per call spread thin enough.
const minExtraCall = 8

func newBatcher(s *Store, cn *conn, max int) *batcher { return &batcher{s: s, cn: cn, max: max} }

func (b *batcher) enqueue(c *call) {
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := b.running < b.max && (b.running < 2 || len(b.queue) >= minExtraCall)
	if start {
		b.running++
	}
	b.mu.Unlock()
	if !start {
		return
	}
	if !b.s.startRun(b) {
		b.mu.Lock()
		b.running--
		queued := b.queue
		b.queue = nil
		b.mu.Unlock()
		for _, c := range queued {
			c.err = fmt.Errorf("redisstore: %w", sluice.ErrClosed)
			c.done <- struct{}{}
		}
	}
}

// run sends script calls, built in l's buffers, until the queue is empty.
func (b *batcher) run(l *batchLoop) {
	for {
		batch := l.batch[:0]
		b.mu.Lock()
		items, bytes, i := 0, 0, 0
		for ; i < len(b.queue); i++ {
			c := b.queue[i]
			kb := c.keyBytes()
			if len(batch) > 0 && (items+len(c.items) > b.s.batch || bytes+kb > maxCallKeyBytes) {
				break
			}
			batch = append(batch, c)
			items += len(c.items)
			bytes += kb
		}
		n := copy(b.queue, b.queue[i:])
		clear(b.queue[n:])
		b.queue = b.queue[:n]
		if len(batch) == 0 {
			b.running--
			b.mu.Unlock()
			l.batch = batch
			return
		}
		b.mu.Unlock()
		b.s.exec(b.cn.client, batch, l.bufs)
		clear(batch) // the calls are their callers' again
		l.batch = batch
		runtime.Gosched() // let the callers just answered queue their next decisions
	}
}

// maxIdleLoops is how many batch goroutines a store keeps waiting for the next batch.
const maxIdleLoops = 8

// batchLoop is a batch goroutine (Store.loop): it runs a batcher's queue until it is
// empty, then waits, idle, for the next batcher to run. At most maxIdleLoops wait per
// store; Close ends them.
type batchLoop struct {
	next  chan *batcher // the next batcher to run, nil to end; buffered, one at most
	bufs  *callBufs
	batch []*call // the calls of the script call being made, reused
}

// startRun has b's queue run by an idle batch goroutine or a new one, unless closed.
func (s *Store) startRun(b *batcher) bool {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed.Load() {
		return false
	}
	s.loopMu.Lock()
	if n := len(s.idle); n > 0 {
		l := s.idle[n-1]
		s.idle[n-1] = nil
		s.idle = s.idle[:n-1]
		s.loopMu.Unlock()
		l.next <- b
		return true
	}
	s.loopMu.Unlock()
	s.inflight.Add(1)
	s.loops.Add(1)
	go s.loop(b)
	return true
}

// loop is a batch goroutine, started to run b (see batchLoop).
func (s *Store) loop(b *batcher) {
	defer s.inflight.Done()
	l := &batchLoop{next: make(chan *batcher, 1), bufs: callBufsPool.Get().(*callBufs)}
	defer func() { callBufsPool.Put(l.bufs) }()
	for b != nil {
		b.run(l)
		if !s.park(l) {
			return
		}
		b = <-l.next
	}
}

// park makes l idle, unless maxIdleLoops already are or the store is closed.
func (s *Store) park(l *batchLoop) bool {
	s.loopMu.Lock()
	defer s.loopMu.Unlock()
	if s.closed.Load() || len(s.idle) >= maxIdleLoops {
		return false
	}
	s.idle = append(s.idle, l)
	return true
}

// endLoops ends the idle batch goroutines; once the store is closed, no more go idle.
func (s *Store) endLoops() {
	s.loopMu.Lock()
	idle := s.idle
	s.idle = nil
	s.loopMu.Unlock()
	for _, l := range idle {
		l.next <- nil
	}
}

// startCall registers a goroutine of calls to Redis with Close, unless closed.
func (s *Store) startCall() bool {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed.Load() {
		return false
	}
	s.inflight.Add(1)
	return true
}

// appendFloat appends x, an integer below 2^53, as the little-endian double the scripts
// read.
func appendFloat(b []byte, x int64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(x)))
}

// bytesString is b as a string without a copy; b must not change while it is in use.
func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// readFloat reads the little-endian double at the start of b, an integer a script wrote.
func readFloat(b []byte) int64 {
	return int64(math.Float64frombits(binary.LittleEndian.Uint64(b)))
}

// readResult reads a result as the scripts return it: four doubles.
func readResult(b []byte) algo.Result {
	return algo.Result{Allowed: readFloat(b) == 1, Remaining: readFloat(b[8:]),
		ResetAfter: readFloat(b[16:]), RetryAfter: readFloat(b[24:])}
}

// callBufs are the buffers a script call is built in (add), and what reading its reply
// needs. A batch goroutine reuses its own from call to call; the strings of a call point
// into them (unsafe.String), so they are reused only after a call that got its reply; after
// an error they are dropped.
type callBufs struct {
	keys       []byte // every key of the call, back to back
	ends       []int  // where each key ends in keys
	reqs, grps []byte
	cal        []byte // the calendar limits' bounds (ARGV[7])
	strs       []string
	ctx        *callCtx // the context of calls with a deadline, nil until one is made
	args       []string // decideArgs
	now        int64    // the call's instant as the store knows it (Store.callNow)
	at         int64    // the script's now, once read
}

// start empties b for a call made now, and returns the scripts' now argument.
func (b *callBufs) start(s *Store) (nowArg string) {
	b.keys, b.ends, b.reqs, b.grps, b.cal = b.keys[:0], b.ends[:0], b.reqs[:0], b.grps[:0], b.cal[:0]
	b.now, nowArg = s.callNow()
	b.at = b.now
	return nowArg
}

// add appends the key of it, and its request as decide.lua reads it, with a calendar
// limit's bounds around b.now.
func (b *callBufs) add(s *Store, it *item) {
	b.keys = s.appendKey(b.keys, it.id, it.info.tail)
	b.ends = append(b.ends, len(b.keys))
	li := it.info
	if li.code != calendarCode {
		b.reqs = it.appendPacked(b.reqs)
		return
	}
	b.reqs = append(b.reqs, li.packed[:16]...)
	b.reqs = appendFloat(b.reqs, int64(len(b.cal)/32+1))
	b.reqs = appendFloat(append(b.reqs, li.packed[24:]...), it.n)
	for _, x := range algo.BoundsAt(li.limit.Calendar, b.now) {
		b.cal = appendFloat(b.cal, x)
	}
}

// keyStrings cuts the call's keys from b.keys, which has stopped growing.
func (b *callBufs) keyStrings() []string {
	keys, start := b.strs[:0], 0
	for _, end := range b.ends {
		keys = append(keys, unsafe.String(&b.keys[start], end-start)) // a key is never empty
		start = end
	}
	b.strs = keys
	return keys
}

// read checks vals, the reply (or err) of what, b's call of n requests: a result each
// (readResult), then the script's now when withNow, which it keeps in b.at.
func (b *callBufs) read(vals []byte, err error, n int, withNow bool, what string) error {
	tail := 0
	if withNow {
		tail = 8
	}
	if err == nil && len(vals) != 32*n+tail {
		return errorf("%s returned %d bytes for %d requests, want %d", what, len(vals), n, 32*n+tail)
	}
	if err == nil && withNow {
		b.at = readFloat(vals[32*n:])
	}
	return err
}

// outcome reads the result at the start of vals, a reply read checked, for a request of li;
// a calendar limit's has the window of its period at the script's now.
func (b *callBufs) outcome(vals []byte, li *limitInfo) algo.Outcome {
	o := algo.Outcome{Result: readResult(vals)}
	if li.code == calendarCode {
		o.Window = algo.BoundsAt(li.limit.Calendar, b.now).Window(b.at)
	}
	return o
}

// callCtx is the context of a script call whose callers all have a deadline: a timer
// cancels it (Err is context.Canceled) at the latest of them, and it has no Deadline.
// rueidis writes a command whose context has a deadline synchronously, and a missed
// deadline breaks the connection; without one the command goes through the pipeline,
// which gives up on the reply and keeps the connection. A batch goroutine reuses one
// (callBufs.ctx) until it ends.
type callCtx struct {
	done  chan struct{}
	timer *time.Timer
	ended atomic.Bool // set just before done is closed
}

func newCallCtx() *callCtx {
	c := &callCtx{done: make(chan struct{})}
	c.timer = time.AfterFunc(time.Hour, c.end)
	c.timer.Stop()
	return c
}

func (c *callCtx) end() {
	c.ended.Store(true)
	close(c.done)
}

func (c *callCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *callCtx) Done() <-chan struct{}       { return c.done }
func (c *callCtx) Value(any) any               { return nil }

func (c *callCtx) Err() error {
	if c.ended.Load() {
		<-c.done // set just before done is closed: wait for the close
		return context.Canceled
	}
	return nil
}

var callBufsPool = sync.Pool{New: func() any { return new(callBufs) }}

// exec decides batch in one script call and answers every call in it.
func (s *Store) exec(client rueidis.Client, batch []*call, bufs *callBufs) {
	live := batch[:0]
	total := 0
	var deadline time.Time
	forever := false
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = fmt.Errorf("redisstore: %w", err)
			c.done <- struct{}{}
			continue
		}
		live = append(live, c)
		total += len(c.items)
		if d, ok := c.ctx.Deadline(); !ok {
			forever = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	nowArg := bufs.start(s)
	for _, c := range live {
		if len(c.items) > 1 {
			bufs.grps = appendFloat(bufs.grps, int64(len(bufs.ends)+1))
			bufs.grps = appendFloat(bufs.grps, int64(len(c.items)))
		}
		for i := range c.items {
			bufs.add(s, &c.items[i])
		}
	}
	keys := bufs.keyStrings()
	// With calendar limits the reply ends with the script's now, for their periods.
	withNow := len(bufs.cal) > 0
	args := decideArgs(bufs.args[:0], nowArg, s.minTTL, bufs.reqs, bufs.grps, repeats(keys), withNow, bufs.cal)
	bufs.args = args

	var ctx context.Context = context.Background()
	var cc *callCtx
	if !forever {
		if cc = bufs.ctx; cc == nil {
			cc = newCallCtx()
			bufs.ctx = cc
		}
		cc.timer.Reset(time.Until(deadline))
		ctx = cc
	}
	vals, err := s.eval(ctx, client, scriptFor(live), keys, args).AsBytes()
	if cc != nil && !cc.timer.Stop() {
		bufs.ctx = nil // ended, or ending: the next call gets a new one
		if errors.Is(err, context.Canceled) {
			err = context.DeadlineExceeded // the callers' deadline passed
		}
	}
	if err = bufs.read(vals, err, total, withNow, "script"); err != nil {
		// The call's context ends only with the timer above; a cancellation while it is
		// live came from another call, whose dial this one waited on (see failed).
		err = wrap(ctx, "decide", err)
		*bufs = callBufs{}
	}
	for _, c := range live {
		if err != nil {
			c.err = err
		} else {
			for i := range c.res {
				c.res[i] = c.items[i].result(bufs.outcome(vals, c.items[i].info))
				vals = vals[32:]
			}
		}
		c.done <- struct{}{}
	}
}
