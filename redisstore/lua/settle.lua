-- Mirrors algo.Settle and algo.refundAt (internal/algo/settle.go), for Store.Settle: the
-- entry point of the settlement script. It refunds or charges the difference between the
-- estimate and the actual cost, marks the record settled, and reports a look.
--
-- KEYS[1]: the limiter key; KEYS[2]: the reservation's record (same hash tag, same slot),
--   four little-endian doubles: the estimate n, at (the decision's now), full_at
--   (algo.Reserved) and the instant it expires, or "s" once settled, with the
--   reservation's TTL.
-- ARGV[1], ARGV[2]: now and the minimum TTL (prelude.lua).
-- ARGV[3]: the limit's four fields as decide.lua's ARGV[3] has them (algorithm, the two
--   fields, burst), little-endian doubles.
-- ARGV[4]: the actual cost, in decimal.
-- Returns five little-endian doubles: a status (0 settled, 1 no such reservation, 2
-- settled already) and the look's allowed, remaining, resetAfter µs and retryAfter µs.

local alg, f1, f2, burst = sunpack('<dddd', ARGV[3])
local c = tonumber(ARGV[4])
local rec = redis.call('GET', KEYS[2])
if not rec then return pack({1, 0, 0, 0, 0}) end
if rec == 's' then return pack({2, 0, 0, 0, 0}) end
local n, at, full, exp = sunpack('<dddd', rec)
if now >= exp then return pack({1, 0, 0, 0, 0}) end
local key = KEYS[1]
local v = redis.call('GET', key)
if c < n then
  local x = n - c
  local rat = at
  if alg == 0 then
    -- algo.refundAt for the bucket machine (f1 = S, f2 = U)
    local xx = x
    if xx > burst then xx = burst end
    local t = full - ceildiv(xx * f2, f1)
    if t > rat then rat = t end
  end
  v = refund[alg](key, v, f1, f2, burst, x, rat)
elseif c > n then
  local x = c - n
  if x > burst then x = burst end
  v = charge[alg](key, v, f1, f2, burst, x)
end
redis.call('SET', KEYS[2], 's', 'KEEPTTL')
local out = {0}
out[2], out[3], out[4], out[5] = run[alg](key, v, f1, f2, burst, 0, false)
return pack(out)
