-- Mirrors algo.ReserveLeakyBucket (internal/algo/reserve.go).
-- State: a = X, the level (1/S µs of work), b = LCT, the last conformance time (possibly
-- in the future while reservations are queued). S, U: the limit's units (algo.Params).
-- maxwait < 0 means no bound.
-- Returns ok (0/1), delay, at, a', b'.
local function reserve_leaky_bucket(a, b, now, burst, S, U, n, maxwait)
  if n == 0 then return 1, 0, now, a, b end
  local bt = burst * U
  local last = b
  if last < now then last = now end
  local level = drain(a, now - b, S)
  local na, nb = level + n * U, last
  local delay, at = 0, now
  local over = na - bt
  if over > 0 then
    local w = ceildiv(over, S)
    na, nb = drain(level, w, S) + n * U, last + w
    delay, at = last + w - now, last + w
  elseif last > now then
    -- time went backwards: the units fit at last, and LeakyBucket admits them once the
    -- clock is within -over/S of it
    delay = last - now + ceildiv(over, S)
    if delay < 0 then delay = 0 end
    at = now + delay
  end
  if maxwait >= 0 and delay > maxwait then
    return 0, delay, at, a, b
  end
  return 1, delay, at, na, nb
end
