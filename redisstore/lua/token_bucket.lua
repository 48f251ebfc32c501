-- Mirrors algo.TokenBucket (internal/algo/bucket.go), and algo.ExpiresAt for TokenBucket,
-- for one request (the arguments and results of gcra in gcra.lua).
-- State: a = credit (1/S µs of refill; one token is U), b = time of the last spend. The
-- zero state (a key that does not exist) is a full bucket. algo.cost, algo.nonNeg,
-- algo.refill and algo.ceilDiv are inline (see gcra.lua); with S = 1 the divisions by S
-- are skipped, and x - x % 1 is floor(x) (exact, as every value is below 2^53) without a
-- call to math.floor.
local function token_bucket(key, v, S, U, burst, n, commit)
  -- decode(v) (prelude.lua), inline: a Lua call per decision costs more than the check
  local a, b = 0, 0
  if v then
    local l, c = #v, 0
    if l == 16 then
      a, b = sunpack('<dd', v)
    elseif l == 8 then
      a = sunpack('<d', v)
    elseif l == 24 then
      a, b, c = sunpack('<ddd', v)
    end
    if not (a >= 0 and a < 2^53 and a % 1 == 0 and b >= 0 and b < 2^53 and b % 1 == 0
        and c >= 0 and c < 2^53 and c % 1 == 0) then
      a, b = 0, 0
    end
  end
  local c = n
  if c == 0 then c = 1 end
  local bt = burst * U
  local credit, last = bt, now
  if a ~= 0 or b ~= 0 then
    last = b
    if last < now then last = now end
    -- algo.refill: min(bt, a + max(0, now - b)·S)
    credit = a
    local el = now - b
    if el > 0 then
      if S == 1 then
        credit = a + el
      elseif el > floor((bt - a) / S) then
        credit = bt
      else
        credit = a + el * S
      end
    end
    if credit > bt then credit = bt end
  end
  local wait = last - now
  -- what can be spent at now: credit, less the refill still to come before last
  local avail = credit
  if wait > 0 then avail = backroom(credit, wait, S) end
  local need = c * U
  -- the time to refill the missing credit, ⌈(bt - credit)/S⌉
  local tofull = bt - credit
  if avail < need then
    local short = need - credit
    if S ~= 1 then
      tofull, short = -floor(-tofull / S), -floor(-short / S)
    end
    if avail < 0 then avail = 0 end
    local rem = avail / U
    return 0, rem - rem % 1, wait + tofull, wait + short
  end
  if n > 0 then
    credit = credit - need
    avail = avail - need
    tofull = bt - credit
  end
  if S ~= 1 then tofull = -floor(-tofull / S) end
  -- The state changes only when units are spent. ExpiresAt: the bucket is full again
  -- once the missing credit has refilled after the last spend.
  if n > 0 and commit then put(key, spack('<dd', credit, last), last + tofull) end
  local rem = avail / U
  return 1, rem - rem % 1, wait + tofull, 0
end
