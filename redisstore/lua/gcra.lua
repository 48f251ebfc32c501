-- Mirrors algo.GCRA (internal/algo/bucket.go), and algo.ExpiresAt for GCRA.
-- State: a = TAT (µs). Returns allowed (0/1), remaining, resetAfter, retryAfter, a'.
local function gcra(a, now, burst, T, n)
  local c = cost(n)
  local bt = burst * T
  local tat = a
  if tat < now then tat = now end
  local newtat = tat + c * T
  local allowat = newtat - bt
  if allowat > now then
    return 0, nonneg(floordiv(now + bt - tat, T)), tat - now, allowat - now, a
  end
  if n > 0 then
    a, tat = newtat, newtat
  end
  return 1, nonneg(floordiv(now + bt - tat, T)), tat - now, 0, a
end

local function gcra_expires(a)
  return a
end
