-- Mirrors algo.ReserveLeakyBucket (internal/algo/reserve.go).
-- State: a = X, the level (µs of work), b = LCT, the last conformance time (possibly in
-- the future while reservations are queued). maxwait < 0 means no bound.
-- Returns ok (0/1), delay, at, a', b'.
local function reserve_leaky_bucket(a, b, now, burst, T, n, maxwait)
  if n == 0 then return 1, 0, now, a, b end
  local bt = burst * T
  local last = b
  if last < now then last = now end
  local level = nonneg(a - nonneg(now - b))
  local na, nb = level + n * T, last
  local delay, at = 0, now
  local over = na - bt
  if over > 0 then
    na, nb = bt, last + over
    delay, at = last + over - now, last + over
  end
  if maxwait >= 0 and delay > maxwait then
    return 0, delay, at, a, b
  end
  return 1, delay, at, na, nb
end
