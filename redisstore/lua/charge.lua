-- Mirrors algo.ChargeGCRA (the bucket machine: GCRA, TokenBucket and LeakyBucket),
-- algo.ChargeFixedWindow and algo.ChargeSlidingWindow (internal/algo/settle.go), and
-- algo.ExpiresAt for the three, for one charge of a settlement (settle.lua): v is the key's
-- value (false when absent), the limit's fields as decide.lua passes them (S, U for the
-- buckets; rate, P for the windows), burst its effective burst (Rate for the windows) and
-- n the units charged, at most burst. The new state is written (put, prelude.lua).
-- Returns the value the key holds afterwards.

-- charge[a] is the charge of algorithm number a (0 for the three bucket names, as in
-- decide.lua).
local charge = {}

-- Mirrors algo.ChargeGCRA. State: TAT = a - b/S µs (gcra.lua).
local function charge_gcra(key, v, S, U, burst, n)
  local a, b = decode(v)
  local bt = burst * U
  if a <= now then a, b = now, 0 end
  if a - now > ceildiv(bt, S) or (a - now) * S - b >= bt then return v end
  a, b = advance(a, b, n * U, S)
  if (a - now) * S - b > bt then
    local q = ceildiv(bt, S)
    a, b = now + q, q * S - bt
  end
  local val
  if S == 1 then val = spack('<d', a) else val = spack('<dd', a, b) end
  put(key, val, a)
  return val
end

-- Mirrors algo.ChargeFixedWindow. State: a = the window counted, b = its count.
local function charge_fixed_window(key, v, rate, P, burst, n)
  local a, b = decode(v)
  local w = window_start(now, P)
  if w > a then a, b = w, 0 end
  local nb = b + n
  if nb > rate then nb = rate end
  if nb > b then b = nb end
  local exp = 0
  if b > 0 then exp = a + P end
  local val = spack('<dd', a, b)
  put(key, val, exp)
  return val
end

-- Mirrors algo.ChargeSlidingWindow. State: a = the current window, b = the previous
-- window's count, c = the current window's (sliding_window.lua).
local function charge_sliding_window(key, v, rate, P, burst, n)
  local a, b, c = decode(v)
  a, b, c = slide(a, b, c, P)
  local nc = c + n
  if nc > rate then nc = rate end
  if nc > c then c = nc end
  local val = spack('<ddd', a, b, c)
  put(key, val, sliding_full_at(a, b, c, P))
  return val
end

charge[0] = charge_gcra
charge[3] = charge_fixed_window
charge[4] = charge_sliding_window
