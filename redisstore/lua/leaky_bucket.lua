-- Mirrors algo.LeakyBucket (internal/algo/bucket.go), and algo.ExpiresAt for LeakyBucket,
-- for one request (the arguments and results of gcra in gcra.lua).
-- State: a = X, the level (1/S µs of work; a unit adds U), b = LCT, the last conformance
-- time. algo.cost, algo.drain and algo.ceilDiv are inline (see gcra.lua); with S = 1 the
-- divisions by S are skipped, and x - x % 1 is floor(x) without a call (token_bucket.lua).
local function leaky_bucket(key, v, S, U, burst, n, commit)
  local a, b = decode(v)
  local c = n
  if c == 0 then c = 1 end
  local bt = burst * U
  local last = b
  if last < now then last = now end
  -- algo.drain: max(0, a - max(0, now - b)·S)
  local level = a
  local el = now - b
  if el > 0 then
    if S == 1 then
      level = a - el
    elseif el >= floor((a + S - 1) / S) then
      level = 0
    else
      level = a - el * S
    end
    if level < 0 then level = 0 end
  end
  local wait = last - now
  -- what can still be added at now: the room at last, less the drain still to come
  -- before last
  local room = bt - level
  if wait > 0 then room = backroom(room, wait, S) end
  local need = c * U
  if need > room then
    local empty, over = level, level + need - bt
    if S ~= 1 then
      empty, over = -floor(-empty / S), -floor(-over / S)
    end
    if room < 0 then room = 0 end
    local rem = room / U
    return 0, rem - rem % 1, wait + empty, wait + over
  end
  if n > 0 then
    level = level + need
    room = room - need
  end
  -- the time to drain, ⌈level/S⌉
  local empty = level
  if S ~= 1 then empty = -floor(-empty / S) end
  -- The state changes only when units are spent. ExpiresAt: LCT + the time to drain.
  if n > 0 and commit then put(key, spack('<dd', level, last), last + empty) end
  local rem = room / U
  return 1, rem - rem % 1, wait + empty, 0
end
