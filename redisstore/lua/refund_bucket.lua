-- Mirrors algo.RefundGCRA (the bucket machine: GCRA, TokenBucket and LeakyBucket) and
-- algo.refundable (internal/algo/refund.go), and algo.ExpiresAt for it, for one refund: v is the key's value (false when absent), S, U the limit's units (algo.Params),
-- burst its effective burst, n the refunded cost and at the instant it was spent. The new
-- state is written (put, prelude.lua) only when it changes. Returns the value the key
-- holds afterwards, for the look that reports it (refund.lua).

-- refund[a] is the refund of algorithm number a (0 for the three bucket names, as in
-- decide.lua): this file and the two after it
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

refund[0] = refund_gcra
