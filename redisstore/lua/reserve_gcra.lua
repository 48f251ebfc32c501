-- Mirrors algo.ReserveGCRA (internal/algo/reserve.go).
-- State: TAT = a - b/S µs (gcra.lua). S, U: the limit's units (algo.Params).
-- maxwait < 0 means no bound.
-- Returns ok (0/1), delay, at, a', b'.
local function reserve_gcra(a, b, now, burst, S, U, n, maxwait)
  if n == 0 then return 1, 0, now, a, b end
  -- algo.tatFrom: max(TAT, now) = ta - tb/S
  local ta, tb = now, 0
  if a > now then ta, tb = a, b end
  local na, nb = advance(ta, tb, n * U, S)
  local delay = nonneg(na - now - floor((nb + burst * U) / S))
  local at = now + delay
  if maxwait >= 0 and delay > maxwait then
    return 0, delay, at, a, b
  end
  if delay > 0 and a <= at then
    -- The rounded-up delay reaches the TAT's own µs: start from at, as GCRA would.
    na, nb = advance(at, 0, n * U, S)
  end
  return 1, delay, at, na, nb
end
