-- reserve_entry.lua: the entry point of the reservation script (redisstore/reserve.go,
-- Store.Reserve and the Cancel of its reservations). Like decide.lua it mirrors the
-- stores' loop around one function of internal/algo: read the key's state, run the
-- transcription above, and write the new state with a TTL equal to the time until it is
-- equivalent to empty (algo.ExpiresAt: TAT for GCRA, the last spend + the time to refill
-- for TokenBucket, LCT + X for LeakyBucket); a state equivalent to empty is deleted. The key is the one AllowN uses, so reservations and
-- decisions share one state.
--
-- KEYS[1]: the key's state.
-- ARGV[1], ARGV[2]: now and the minimum TTL (prelude.lua).
-- ARGV[3]: "r" to reserve, "c" to cancel.
-- ARGV[4..7]: algorithm (0 GCRA, 1 TokenBucket, 2 LeakyBucket), the limit's units S and U (algo.Params:
--   one unit of cost is U/S µs, exactly Period/Rate), burst (Limit.EffectiveBurst).
-- Reserve: ARGV[8] cost n, ARGV[9] maxWait µs (-1: no bound).
--   Returns ok, delay, at, before a, before b, after a, after b.
-- Cancel: ARGV[8] at, ARGV[9..12] before a, before b, after a, after b.
--   Returns 1 if the units were given back, 0 otherwise.

local op = ARGV[3]
local alg, S, U, burst = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local key = KEYS[1]

local a, b = decode(redis.call('GET', key))

-- store writes the new state, or deletes the key when the state is equivalent to empty
-- (ExpiresAt has come: a for GCRA, b + ⌈(burst·U - credit)/S⌉ for TokenBucket, 0 for its
-- zero state, and LCT + ⌈level/S⌉ for LeakyBucket).
local function store(na, nb)
  local val, exp
  if alg == 1 then
    val, exp = spack('<dd', na, nb), 0
    if na ~= 0 or nb ~= 0 then exp = nb + ceildiv(burst * U - na, S) end
  elseif alg == 2 then
    val, exp = spack('<dd', na, nb), nb + ceildiv(na, S)
  elseif nb == 0 then
    val, exp = spack('<d', na), na
  else
    val, exp = spack('<dd', na, nb), na
  end
  if exp > now then
    put(key, val, exp)
  else
    redis.call('DEL', key)
  end
end

if op == 'r' then
  local n, maxwait = tonumber(ARGV[8]), tonumber(ARGV[9])
  local ok, delay, at, na, nb
  if alg == 0 then
    ok, delay, at, na, nb = reserve_gcra(a, b, now, burst, S, U, n, maxwait)
  elseif alg == 1 then
    ok, delay, at, na, nb = reserve_token_bucket(a, b, now, burst, S, U, n, maxwait)
  else
    ok, delay, at, na, nb = reserve_leaky_bucket(a, b, now, burst, S, U, n, maxwait)
  end
  if ok == 1 and n > 0 then store(na, nb) end
  return {ok, delay, at, a, b, na, nb}
end

local at = tonumber(ARGV[8])
local ok, na, nb = cancel_reservation(a, b, now, at, tonumber(ARGV[9]), tonumber(ARGV[10]),
  tonumber(ARGV[11]), tonumber(ARGV[12]))
if ok == 1 then store(na, nb) end
return ok
