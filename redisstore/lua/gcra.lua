-- Mirrors algo.GCRA (internal/algo/bucket.go), and algo.ExpiresAt for GCRA, for one
-- request: v is the key's value (false when absent); S, U are the limit's units
-- (algo.Params: time in 1/S µs, one unit of cost U of them, U/S = Period/Rate exactly),
-- burst its effective burst, n the cost; the new state is written only when commit is
-- true. State: TAT = a - b/S µs, a whole µs and the part below it (b is 0 when S = 1, and
-- the value then 8 bytes). Returns allowed (0/1), remaining, resetAfter, retryAfter.
-- The hottest path, written flat: the helpers and codec are inline, S = 1 skips the
-- divisions by S, and x - x % 1 is floor(x), exactly below 2^53.
local function gcra(key, v, S, U, burst, n, commit)
  local a, b = 0, 0
  if v then
    local l = #v
    if l == 8 then
      a = sunpack('<d', v)
    elseif l == 16 then
      a, b = sunpack('<dd', v)
    end
    -- the fields checked as decode checks them (prelude.lua)
    if not (a >= 0 and a < 2^53 and a % 1 == 0 and b >= 0 and b < 2^53 and b % 1 == 0) then
      a, b = 0, 0
    end
  end
  local c = n
  if c == 0 then c = 1 end
  local bt = burst * U
  if S == 1 then
    local tat = a
    if tat < now then tat = now end
    local newtat = tat + c * U
    local allowat = newtat - bt
    if allowat > now then
      local rem = (now + bt - tat) / U
      rem = rem - rem % 1
      if rem < 0 then rem = 0 end
      return 0, rem, tat - now, allowat - now
    end
    if n > 0 then
      tat = newtat
      -- The state changes only when units are spent; ExpiresAt is the TAT.
      if commit then put(key, spack('<d', tat), tat) end
    end
    local rem = (now + bt - tat) / U
    rem = rem - rem % 1
    if rem < 0 then rem = 0 end
    return 1, rem, tat - now, 0
  end
  -- max(TAT, now) = ta - tb/S
  local ta, tb = now, 0
  if a > now then ta, tb = a, b end
  -- algo.advance: TAT + c·U/S as a whole µs rounded up and the part below it
  local k = c * U - tb
  local q = (k + S - 1) / S
  q = q - q % 1
  local na, nb = ta + q, q * S - k
  local late = (nb + bt) / S
  late = na - now - (late - late % 1)
  if late <= 0 then
    if n > 0 then
      ta, tb = na, nb
      if commit then put(key, spack('<dd', na, nb), na) end
    end
  end
  -- algo.gcraRemaining
  local ahead = ta - now
  local rem = 0
  local room = bt / S
  if ahead <= room - room % 1 + 1 then
    rem = (bt - (ahead * S - tb)) / U
    rem = rem - rem % 1
    if rem < 0 then rem = 0 end
  end
  if late > 0 then return 0, rem, ahead, late end
  return 1, rem, ahead, 0
end
