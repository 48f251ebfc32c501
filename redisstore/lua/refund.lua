-- The entry point of the refund script (redisstore/slots.go, Store.allowAcrossSlots): it
-- gives back, in one slot, what a call of decide.lua spent for a request that was denied
-- in another slot. Each request runs the refund of its algorithm above (mirroring one
-- function of internal/algo/refund.go), which reads the key's state and writes the new
-- one with a TTL equal to the time until it is equivalent to empty (algo.ExpiresAt), and
-- then a look (cost 0, mirroring the decision function as decide.lua runs it) reports
-- the key as it stands.
--
-- KEYS: one per request, in order; every one is distinct.
-- ARGV[1], ARGV[2]: now and the minimum TTL (prelude.lua).
-- ARGV[3]: the requests, six little-endian doubles each: algorithm, the limit's two
--   fields and burst (or lease id) as in decide.lua's ARGV[3], the cost n that was spent, and at, the
--   now of the decide.lua call that spent it.
-- ARGV[7]: absent, or the calendar bounds (calendar_window.lua); then the script's now
--   follows the results, as decide.lua's ARGV[6] makes it.
-- Returns the looks' results as decide.lua returns its decisions: allowed (0/1),
-- remaining, resetAfter µs and retryAfter µs per request, as little-endian doubles.

local reqs = ARGV[3]
local out = {}
local pos = 1
for i = 1, #KEYS do
  local alg, f1, f2, burst, n, at
  alg, f1, f2, burst, n, at, pos = sunpack('<dddddd', reqs, pos)
  local key = KEYS[i]
  local v = false
  if alg < 5 or alg == 7 then v = redis.call('GET', key) end -- strings; 5 and 6 are sorted sets
  if n > 0 then v = refund[alg](key, v, f1, f2, burst, n, at) end
  local o = 4 * i
  out[o - 3], out[o - 2], out[o - 1], out[o] = run[alg](key, v, f1, f2, burst, 0, false)
end
if ARGV[7] then out[#out + 1] = now end
return pack(out)
