-- Mirrors algo.MulDiv, algo.MulDivCeil, algo.floorDiv, algo.ceilDiv, algo.advance,
-- algo.nonNeg, algo.windowStart and algo.cost (internal/algo); and the clock, the state
-- codec and the state writes shared by the algorithm files that follow.
--
-- ARGV[1]: now in µs since the Unix epoch, or "-" to read Redis's clock (TIME).
-- ARGV[2]: the minimum key TTL in ms.
--
-- Every value is an integer below 2^53, exact as a double (sluice.Limit.Validate bounds
-- it); floor(a / b) is then exact for b > 0. 2^53 is written out: Lua folds it.
local floor = math.floor

-- Mirrors algo.nonNeg.
local function nonneg(a)
  if a < 0 then return 0 end
  return a
end

-- Mirrors algo.floorDiv: ⌊a/b⌋ for b > 0 and any |a| < 2^53.
local function floordiv(a, b)
  return floor(a / b)
end

-- Mirrors algo.ceilDiv: ⌈a/b⌉ for b > 0 and any |a| < 2^53.
local function ceildiv(a, b)
  return -floor(-a / b)
end

-- Mirrors algo.advance: the time a - b/S + k/S (k > 0) as a whole µs rounded up and the
-- part below it, in [0, S). (gcra.lua writes it inline on its hot path.)
local function advance(a, b, k, S)
  k = k - b
  local q = floor((k + S - 1) / S)
  return a + q, q * S - k
end

-- Mirrors algo.MulDiv and algo.MulDivCeil: ⌊a·b/c⌋ and the remainder, for a, b ≥ 0 and
-- 0 < c < 2^52, when the result is below 2^53. Above 2^53, a = q0·c + r0 and r0·b/c is a
-- binary long division over the bits of b, every intermediate below 2·c.
local function muldivrem(a, b, c)
  local p = a * b
  if p < 2^53 then
    local q = floor(p / c)
    return q, p - q * c
  end
  local q0 = floor(a / c)
  local r0 = a - q0 * c
  local bit = 1
  while bit * 2 <= b do bit = bit * 2 end
  local q, r, rest = 0, 0, b
  while bit >= 1 do
    q, r = q * 2, r * 2
    if r >= c then q, r = q + 1, r - c end
    if rest >= bit then
      rest = rest - bit
      r = r + r0
      if r >= c then q, r = q + 1, r - c end
    end
    bit = bit / 2
  end
  return q0 * b + q, r
end

local function muldiv(a, b, c)
  local q = muldivrem(a, b, c)
  return q
end

local function muldivceil(a, b, c)
  local q, r = muldivrem(a, b, c)
  if r > 0 then return q + 1 end
  return q
end

-- Mirrors algo.windowStart: the start of the window of length period holding now.
local function window_start(now, period)
  return floordiv(now, period) * period
end

-- Mirrors algo.cost: the cost a call is evaluated at (1 for a look).
local function cost(n)
  if n == 0 then return 1 end
  return n
end

-- now is the decision's instant (µs); minttl the minimum key TTL (ms); ownclock is true
-- when now is Redis's TIME.
local now, ownclock
if ARGV[1] == '-' then
  local t = redis.call('TIME')
  now, ownclock = tonumber(t[1]) * 1000000 + tonumber(t[2]), true
else
  now = tonumber(ARGV[1])
end
local minttl = tonumber(ARGV[2])

-- State codec: a fixed-size state (algo.State's A, B, C) is one string key holding the
-- fields it uses as little-endian doubles, 8, 16 or 24 bytes (binary: decimal text would
-- be a large part of the server's work).
local sformat, spack, sunpack = string.format, struct.pack, struct.unpack

-- decode returns a state's three fields from a key's value (false when the key is
-- absent). A value of another length, or whose fields are not integers in [0, 2^53) (NaN
-- fails every comparison), reads as the empty state: never a garbage state.
local function decode(v)
  if not v then return 0, 0, 0 end
  local l = #v
  local a, b, c = 0, 0, 0
  if l == 8 then
    a = sunpack('<d', v)
  elseif l == 16 then
    a, b = sunpack('<dd', v)
  elseif l == 24 then
    a, b, c = sunpack('<ddd', v)
  else
    return 0, 0, 0
  end
  if a >= 0 and a < 2^53 and a % 1 == 0 and b >= 0 and b < 2^53 and b % 1 == 0
      and c >= 0 and c < 2^53 and c % 1 == 0 then
    return a, b, c
  end
  return 0, 0, 0
end

-- ttlms converts the µs until a state is equivalent to empty into a key TTL in ms,
-- rounded up and raised to the store's minimum.
local function ttlms(us)
  local ms = floor((us + 999) / 1000)
  if ms < minttl then ms = minttl end
  return ms
end

-- int formats an integer for a command argument ("%d", not redis.call's "%.17g").
local function int(x)
  return sformat('%d', x)
end

-- written[key] is the value this call last wrote to key (false: deleted), so that two
-- requests on one key in one call see each other's spending; nil unless a key repeats
-- among KEYS (decide.lua).
local written

-- lastttl is the TTL (ms) put formatted last, and lastarg that text.
local lastttl, lastarg = -1, ''

-- put stores a key's new state val, which becomes equivalent to empty at exp
-- (algo.ExpiresAt): PSETEX with a TTL of ttlms(exp - now), written inline, or DEL when
-- that is not positive. prev, when given, is the ExpiresAt of the state val replaces:
-- when exp is prev the key already lives long enough, and on Redis's clock, where the
-- minimum would not raise it, put keeps its TTL (SET ... KEEPTTL).
local function put(key, val, exp, prev)
  local left = exp - now
  if exp == prev and ownclock and left > 0 and left >= minttl * 1000 then
    redis.call('SET', key, val, 'KEEPTTL')
    if written then written[key] = val end
    return
  end
  local ttl = (left + 999) / 1000
  ttl = ttl - ttl % 1
  if ttl < minttl then ttl = minttl end
  if ttl > 0 then
    if ttl ~= lastttl then
      lastttl, lastarg = ttl, sformat('%d', ttl)
    end
    redis.call('PSETEX', key, lastarg, val)
    if written then written[key] = val end
  else
    redis.call('DEL', key)
    if written then written[key] = false end
  end
end

-- pack returns the integers of out as little-endian doubles, the scripts' reply, at most
-- 1000 values per struct.pack (Lua's C stack).
local function pack(out)
  local nout = #out
  if nout <= 1000 then
    return spack('<' .. string.rep('d', nout), unpack(out))
  end
  local parts = {}
  for j = 1, nout, 1000 do
    local last = j + 999
    if last > nout then last = nout end
    parts[#parts + 1] = spack('<' .. string.rep('d', last - j + 1), unpack(out, j, last))
  end
  return table.concat(parts)
end
