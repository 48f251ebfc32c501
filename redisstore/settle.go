package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/algo"
	"github.com/sluicehq/sluice/store"
)

// settleScript settles a reservation (lua/settle.lua), with every algorithm for the look
// at the key afterwards.
var settleScript = algoScript(allAlgos,
	"refund_bucket.lua", "refund_window.lua", "refund_log.lua", "charge.lua", "settle.lua")

// recordKey is the key of reservation id of identity key under the Limit whose key is
// stateKey: beside it, in the same slot.
func recordKey(stateKey string, id uint64) string {
	return stateKey + ":res:" + strconv.FormatUint(id, 36)
}

// decideSettled decides reqs, some of which carry a SettleTTL, in one script call per
// slot that reports its now (Store.allowAcrossSlots), then writes the records of the
// allowed ones' reservations, in one round trip. A record not written leaves its decision
// without a Reservation.
func (s *Store) decideSettled(ctx context.Context, cn *conn, reqs []sluice.Request, out []sluice.Decision) error {
	ats := make([]int64, len(reqs))
	ds, err := s.allowAcrossSlots(ctx, reqs, ats)
	if err != nil {
		return err
	}
	copy(out, ds)
	// The records expire with their reservations on the script's clock (settle.lua); Redis
	// drops them after the TTL in its own time.
	c := cn.client
	var ids []int
	var cmds rueidis.Commands
	for i := range reqs {
		r := &reqs[i]
		if r.SettleTTL <= 0 || r.N == 0 || !out[i].Allowed {
			continue
		}
		id := rand.Uint64N(store.MaxLeaseID) + 1
		rv := algo.ReservedOf(algo.ParamsOf(r.Limit), r.N, ats[i], algo.Result{ResetAfter: out[i].ResetAfter.Microseconds()})
		var b []byte
		for _, x := range []int64{rv.N, rv.At, rv.FullAt, ats[i] + r.SettleTTL.Microseconds()} {
			b = appendFloat(b, x)
		}
		k := recordKey(s.redisKey(r.Key, s.info(r.Limit)), id)
		ids = append(ids, i)
		ttl := max(r.SettleTTL.Milliseconds(), 1)
		cmds = append(cmds, c.B().Set().Key(k).Value(string(b)).PxMilliseconds(ttl).Build())
		out[i].Reservation = sluice.ReservationID(id)
	}
	if len(ids) == 0 {
		return nil
	}
	for k, res := range c.DoMulti(ctx, cmds...) {
		if err := res.Error(); err != nil {
			out[ids[k]].Reservation = 0
			s.logger.Warn("redisstore: a reservation's record was not written; its estimate stands", "error", err)
		}
	}
	return nil
}

// Settle implements sluice.Limiter: one script call (lua/settle.lua) on the key and the
// reservation's record, in one slot.
func (s *Store) Settle(ctx context.Context, key string, limit sluice.Limit, reservation sluice.ReservationID, cost int64) (sluice.Decision, error) {
	if err := store.CheckSettle(key, limit, reservation, cost); err != nil {
		return sluice.Decision{}, err
	}
	cn, err := s.usable()
	if err != nil {
		return sluice.Decision{}, err
	}
	li := s.info(limit)
	k := s.redisKey(key, li)
	args := []string{s.scriptNow(), s.minTTL, bytesString(li.packed[:]), strconv.FormatInt(cost, 10)}
	vals, err := s.eval(ctx, cn.client, settleScript, []string{k, recordKey(k, uint64(reservation))}, args).AsBytes()
	if err == nil && len(vals) != 40 {
		err = errorf("settle script returned %d bytes, want 40", len(vals))
	}
	if err != nil {
		return sluice.Decision{}, wrap(ctx, "settle", err)
	}
	switch readFloat(vals) {
	case 1:
		return sluice.Decision{}, fmt.Errorf("%w: %s (never made, or past its settle TTL and standing at its estimate)", sluice.ErrUnknownReservation, reservation)
	case 2:
		return sluice.Decision{}, fmt.Errorf("%w: %s", sluice.ErrSettled, reservation)
	}
	return algo.Outcome{Result: readResult(vals[8:])}.Decision(limit), nil
}
