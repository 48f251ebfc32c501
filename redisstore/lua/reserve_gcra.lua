-- Mirrors algo.ReserveGCRA (internal/algo/reserve.go).
-- State: a = TAT (µs). maxwait < 0 means no bound.
-- Returns ok (0/1), delay, at, a'.
local function reserve_gcra(a, now, burst, T, n, maxwait)
  if n == 0 then return 1, 0, now, a end
  local tat = a
  if tat < now then tat = now end
  local newtat = tat + n * T
  local delay = nonneg(newtat - burst * T - now)
  if maxwait >= 0 and delay > maxwait then
    return 0, delay, now + delay, a
  end
  return 1, delay, now + delay, newtat
end
