-- Mirrors algo.GCRA (internal/algo/bucket.go), and algo.ExpiresAt for GCRA, for one
-- request: v is the key's value (false when absent), the limit's rate, period (µs) and
-- effective burst, the cost n; the new state is written only when commit is true.
-- State: a = TAT (µs). Returns allowed (0/1), remaining, resetAfter, retryAfter.
-- The hottest path of the store, written flat: algo.cost, algo.nonNeg and algo.floorDiv
-- are inline (a Lua function call costs more than this arithmetic).
local function gcra(key, v, rate, period, burst, n, commit)
  local a = 0
  if v and #v == 8 then
    a = sunpack('<d', v)
    if not field(a) then a = 0 end -- as decode does
  end
  local T = floor((period + rate - 1) / rate)
  local c = n
  if c == 0 then c = 1 end
  local bt = burst * T
  local tat = a
  if tat < now then tat = now end
  local newtat = tat + c * T
  local allowat = newtat - bt
  if allowat > now then
    local rem = floor((now + bt - tat) / T)
    if rem < 0 then rem = 0 end
    return 0, rem, tat - now, allowat - now
  end
  if n > 0 then
    tat = newtat
    -- The state changes only when units are spent; ExpiresAt is the TAT.
    if commit then put(key, spack('<d', tat), tat) end
  end
  local rem = floor((now + bt - tat) / T)
  if rem < 0 then rem = 0 end
  return 1, rem, tat - now, 0
end
run[0] = gcra
