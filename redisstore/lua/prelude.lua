-- Mirrors algo.MulDiv, algo.MulDivCeil, algo.floorDiv, algo.nonNeg and algo.cost
-- (internal/algo): the integer helpers, and the state codec shared by the algorithm files
-- that follow.
--
-- Lua numbers are doubles. Every value below is an integer of magnitude < 2^53, where
-- doubles are exact; sluice.Limit.Validate bounds Rate, Period and Burst·T so that this
-- holds for every algorithm. Quotients use floor(a / b), which is exact for |a| < 2^53 and
-- b > 0: the true quotient's distance to the next integer is at least 1/b, and the double
-- division errs by less than |a|/(b·2^53) < 1/b.

local floor = math.floor
local TWO53 = 9007199254740992

-- Mirrors algo.nonNeg.
local function nonneg(a)
  if a < 0 then return 0 end
  return a
end

-- Mirrors algo.floorDiv: ⌊a/b⌋ for b > 0 and any |a| < 2^53.
local function floordiv(a, b)
  return floor(a / b)
end

-- Mirrors algo.MulDiv and algo.MulDivCeil: ⌊a·b/c⌋ and whether a remainder is left, for
-- a, b ≥ 0 and 0 < c < 2^52, when the result is below 2^53.
--
-- When a·b < 2^53 the product is exact and one division is exact. Otherwise a = q0·c + r0
-- and a·b/c = q0·b + r0·b/c; r0·b/c is a binary long division over the bits of b: the
-- running remainder stays below c, so every intermediate is below 2·c < 2^53.
local function muldivrem(a, b, c)
  local p = a * b
  if p < TWO53 then
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

-- Mirrors algo.cost: the cost a call is evaluated at (1 for a look).
local function cost(n)
  if n == 0 then return 1 end
  return n
end

-- State codec: a fixed-size state (algo.State's A, B, C) is one string key holding the
-- fields it uses as decimal integers separated by spaces ("A", "A B" or "A B C").
local sfind, ssub, sformat = string.find, string.sub, string.format

local function decode(v)
  local i = sfind(v, ' ', 1, true)
  if not i then return tonumber(v), 0, 0 end
  local j = sfind(v, ' ', i + 1, true)
  if not j then return tonumber(ssub(v, 1, i - 1)), tonumber(ssub(v, i + 1)), 0 end
  return tonumber(ssub(v, 1, i - 1)), tonumber(ssub(v, i + 1, j - 1)), tonumber(ssub(v, j + 1))
end

-- ttlms converts the µs until a state is equivalent to empty into a key TTL in whole
-- milliseconds, rounded up (a key never expires while its state still matters) and raised
-- to the store's minimum.
local function ttlms(us, minttl)
  local ms = floor((us + 999) / 1000)
  if ms < minttl then ms = minttl end
  return ms
end
