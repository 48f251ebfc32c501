-- Mirrors Store.Reserve and its Cancel (redisstore/reserve.go): the entry point of the
-- reservation script, on the key AllowN uses. It reads the key's state, runs the
-- transcription above, and writes the new state (deleted once equivalent to empty).
--
-- KEYS[1]: the key's state.
-- ARGV[1], ARGV[2]: now and the minimum TTL (prelude.lua).
-- ARGV[3]: "r" to reserve, "c" to cancel.
-- ARGV[4..7]: algorithm (0, the bucket machine, for GCRA, TokenBucket and LeakyBucket
--   alike; unused), the limit's units S and U (algo.Params: one unit of cost is U/S µs,
--   exactly Period/Rate), burst (store.EffectiveBurst).
-- Reserve: ARGV[8] cost n, ARGV[9] maxWait µs (-1: no bound).
--   Returns ok, delay, at, before a, before b, after a, after b.
-- Cancel: ARGV[8] at, ARGV[9..12] before a, before b, after a, after b.
--   Returns 1 if the units were given back, 0 otherwise.

local op = ARGV[3]
local S, U, burst = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local key = KEYS[1]

local a, b = decode(redis.call('GET', key))

-- store writes the new state, or deletes the key when the state is equivalent to empty
-- (ExpiresAt, the TAT's whole µs na, has come).
local function store(na, nb)
  local val = spack('<dd', na, nb)
  if nb == 0 then val = spack('<d', na) end
  if na > now then
    put(key, val, na)
  else
    redis.call('DEL', key)
  end
end

if op == 'r' then
  local n, maxwait = tonumber(ARGV[8]), tonumber(ARGV[9])
  local ok, delay, at, na, nb = reserve_gcra(a, b, now, burst, S, U, n, maxwait)
  if ok == 1 and n > 0 then store(na, nb) end
  return {ok, delay, at, a, b, na, nb}
end

local at = tonumber(ARGV[8])
local ok, na, nb = cancel_reservation(a, b, now, at, tonumber(ARGV[9]), tonumber(ARGV[10]),
  tonumber(ARGV[11]), tonumber(ARGV[12]))
if ok == 1 then store(na, nb) end
return ok
