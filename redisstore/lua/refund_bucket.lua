-- Mirrors algo.RefundGCRA, algo.RefundTokenBucket, algo.RefundLeakyBucket and
-- algo.refundable (internal/algo/refund.go), and algo.ExpiresAt for the three, for one
-- refund: v is the key's value (false when absent), S, U the limit's units (algo.Params),
-- burst its effective burst, n the refunded cost and at the instant it was spent. The new
-- state is written (put, prelude.lua) only when it changes. Returns the value the key
-- holds afterwards, for the look that reports it (refund.lua).

-- refund[a] is the refund of algorithm number a: this file and the two after it
-- (refund_window.lua, refund_log.lua) register theirs, as the algorithm files do in run.
local refund = {}

-- Mirrors algo.refundable: what RefundGCRA gives back, in units of 1/S µs.
local function refundable(n, at, S, U)
  local g = n * U
  local e = now - at
  if e <= 0 then return g end
  if e >= ceildiv(g, S) then return 0 end
  return g - e * S
end

-- Mirrors algo.RefundGCRA. State: TAT = a - b/S µs (gcra.lua).
local function refund_gcra(key, v, S, U, burst, n, at)
  local a, b = decode(v)
  local g = refundable(n, at, S, U)
  if g <= 0 or a <= now then return v end
  local k = b + g
  local q = floor(k / S)
  a, b = a - q, k - q * S
  if a <= now then a, b = now, 0 end
  local val
  if S == 1 then val = spack('<d', a) else val = spack('<dd', a, b) end
  put(key, val, a)
  return val
end

-- Mirrors algo.RefundTokenBucket. State: a = credit at b, the last spend (token_bucket.lua).
local function refund_token_bucket(key, v, S, U, burst, n, at)
  local a, b = decode(v)
  local g = refundable(n, at, S, U)
  local bt = burst * U
  if g <= 0 or (a == 0 and b == 0) then return v end
  -- algo.refill(a, now - b, bt, S): the credit at now; a full bucket keeps its state
  local credit = a
  local el = now - b
  if el > 0 then
    if el > floor((bt - a) / S) then credit = bt else credit = a + el * S end
  end
  if credit >= bt then return v end
  local top = bt - nonneg(now - b) * S
  a = a + g
  if a > top then a = top end
  local val = spack('<dd', a, b)
  put(key, val, b + ceildiv(bt - a, S))
  return val
end

-- Mirrors algo.RefundLeakyBucket. State: a = X, the level at b = LCT (leaky_bucket.lua).
local function refund_leaky_bucket(key, v, S, U, burst, n, at)
  local a, b = decode(v)
  local g = refundable(n, at, S, U)
  if g <= 0 or drain(a, now - b, S) == 0 then return v end
  local low = nonneg(now - b) * S
  a = a - g
  if a < low then a = low end
  local val = spack('<dd', a, b)
  put(key, val, b + ceildiv(a, S))
  return val
end

refund[0] = refund_gcra
refund[1] = refund_token_bucket
refund[2] = refund_leaky_bucket
