-- Mirrors algo.MulDiv, algo.MulDivCeil, algo.floorDiv, algo.ceilDiv, algo.advance,
-- algo.nonNeg, algo.windowStart and algo.cost (internal/algo): the integer helpers; and the clock, the state codec and the state writes shared by the algorithm
-- files that follow, which mirror the stores' read, decide, write loop around each
-- function of internal/algo.
--
-- ARGV[1]: now in µs since the Unix epoch, or "-" to read Redis's clock (TIME).
-- ARGV[2]: the minimum key TTL in ms.
--
-- Lua numbers are doubles. Every value below is an integer of magnitude < 2^53, where
-- doubles are exact; sluice.Limit.Validate bounds Rate, Period and Burst·T so that this
-- holds for every algorithm. Quotients use floor(a / b), which is exact for |a| < 2^53 and
-- b > 0: the true quotient's distance to the next integer is at least 1/b, and the double
-- division errs by less than |a|/(b·2^53) < 1/b.

-- 2^53 is written as such: Lua folds it into a constant, where a local would be one
-- more upvalue for every function using it to capture, on every call.
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

-- Mirrors algo.MulDiv and algo.MulDivCeil: ⌊a·b/c⌋ and whether a remainder is left, for
-- a, b ≥ 0 and 0 < c < 2^52, when the result is below 2^53.
--
-- When a·b < 2^53 the product is exact and one division is exact. Otherwise a = q0·c + r0
-- and a·b/c = q0·b + r0·b/c; r0·b/c is a binary long division over the bits of b: the
-- running remainder stays below c, so every intermediate is below 2·c < 2^53.
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

-- Mirrors algo.windowStart: the start of the window of length period holding now, windows
-- aligned to multiples of period since the Unix epoch (FixedWindow, SlidingWindow).
local function window_start(now, period)
  return floordiv(now, period) * period
end

-- Mirrors algo.cost: the cost a call is evaluated at (1 for a look).
local function cost(n)
  if n == 0 then return 1 end
  return n
end

-- now is the decision's instant (µs); minttl the minimum key TTL (ms). ownclock is true
-- when now is Redis's own (TIME), the clock key TTLs run out on.
local now, ownclock
if ARGV[1] == '-' then
  local t = redis.call('TIME')
  now, ownclock = tonumber(t[1]) * 1000000 + tonumber(t[2]), true
else
  now = tonumber(ARGV[1])
end
local minttl = tonumber(ARGV[2])

-- State codec: a fixed-size state (algo.State's A, B, C) is one string key holding the
-- fields it uses ("A", "A B" or "A B C") as little-endian IEEE-754 doubles, 8, 16 or 24
-- bytes. Every field is an integer below 2^53, so the doubles are exact. Binary, not
-- decimal text, because formatting and parsing decimal numbers (sprintf and strtod inside
-- Lua and Redis) would be a large part of the server's work per decision.
local sformat, spack, sunpack = string.format, struct.pack, struct.unpack

-- decode returns a state's three fields from a key's value (false when the key is
-- absent). A value of any other length, or whose fields are not integers in [0, 2^53)
-- (written by something other than this store, such as a version that kept decimal
-- text), reads as the empty state: it may grant a fresh quota once, but never locks a
-- client out with a garbage state. The field check is x >= 0 and x < 2^53 and x % 1 == 0
-- (floor(x) == x without a call to math.floor; NaN fails every comparison), written out
-- for each field because a Lua call costs more than the check.
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

-- ttlms converts the µs until a state is equivalent to empty into a key TTL in whole
-- milliseconds, rounded up (a key never expires while its state still matters) and raised
-- to the store's minimum.
local function ttlms(us)
  local ms = floor((us + 999) / 1000)
  if ms < minttl then ms = minttl end
  return ms
end

-- int formats an integer for a command argument. redis.call would format a Lua number
-- with "%.17g", the slow floating-point path of printf; "%d" is the integer path.
local function int(x)
  return sformat('%d', x)
end

-- written[key] is the value this call last wrote to key (false: deleted), so that two
-- requests on one key in one call see each other's spending. It is kept only when a key
-- repeats among KEYS: decide.lua makes the table then (a table per call costs Redis its
-- allocation and collection), and it is nil otherwise.
local written

-- lastttl is the TTL (ms) put formatted last, and lastarg that text: requests on fresh
-- keys of one limit, and every TTL raised to the minimum, share a TTL, so most calls
-- format few. (One remembered value, not a table of them: a table per call costs more
-- than it saves in a call of one decision.)
local lastttl, lastarg = -1, ''

-- put stores a key's new state val, which becomes equivalent to empty at exp
-- (algo.ExpiresAt): PSETEX with a TTL of ttlms(exp - now), or DEL when that is not
-- positive. (PSETEX rather than SET ... PX: one argument fewer to convert and no options
-- to parse; bench/README.md has the count.)
-- With a minimum TTL, a state equivalent to empty is kept for that long (as package
-- memory keeps it until its sweep): a clock that steps back then still sees it.
-- (ttlms and int are inline, and floor is ttl - ttl % 1, exact below 2^53: this runs for
-- every decision that spends, and every name it uses is one more upvalue to capture.)
--
-- prev, when given, is the ExpiresAt of the state val replaces. Every write sets a key's
-- TTL to at least the time until its state's ExpiresAt, so when exp is prev the key
-- already lives long enough: put then keeps its TTL (SET ... KEEPTTL), which spares Redis
-- deleting and adding the key's expiry and rewriting the command for propagation. Only on
-- Redis's clock (on another, TTLs computed from it run out on Redis's, so each write sets
-- them again), and only where the minimum would not raise the TTL.
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

-- pack returns the integers of out as one string of little-endian doubles, the scripts'
-- reply. struct.pack takes its values on Lua's C stack: at most 1000 at a time.
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
