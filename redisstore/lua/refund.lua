-- Mirrors Store.refundSlot, for Store.allowAcrossSlots (redisstore/slots.go): the entry
-- point of the refund script. It gives back, in one slot, what decide.lua spent for a
-- batch denied in another slot: each request runs its algorithm's refund above
-- (internal/algo/refund.go), then a look.
--
-- KEYS: one per request, in order; every one is distinct.
-- ARGV[1], ARGV[2]: now and the minimum TTL (prelude.lua).
-- ARGV[3]: the requests, six little-endian doubles each: algorithm, the limit's two
--   fields and burst (or lease id) as in decide.lua's ARGV[3], the cost n spent, and at,
--   the now of the decide.lua call that spent it.
-- ARGV[7]: absent, or the calendar bounds (calendar_window.lua); then the script's now
--   follows the results, as decide.lua's ARGV[6] makes it.
-- Returns the looks' results as decide.lua returns its decisions.

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
