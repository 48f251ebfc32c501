-- Mirrors quota.(*Memory).rebalance and quota.Share (quota/memory.go, quota/divide.go)
-- for one report. KEYS[1]: the bucket's hash (client -> "weight share", and the sums
-- '#w' of weights and '#s' of shares); KEYS[2]: the bucket's sorted set of client
-- expiries (µs). ARGV: now (µs, or "-" for Redis's clock), client, rate, weight, ttl
-- (µs), max clients. Returns {share (-1: refused, the bucket is full), clients, sum of
-- shares}. Numbers stay below 2^53 (quota.Share's bounds), so Lua's doubles are exact.
local now = ARGV[1]
if now == '-' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(now)
end
local c, rate, w = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local ttl, maxc = tonumber(ARGV[5]), tonumber(ARGV[6])

-- floor(x / y) exactly, for 0 <= x < 2^53 and y > 0: the double quotient may round up.
local function idiv(x, y)
  local q = math.floor(x / y)
  if q * y > x then q = q - 1 elseif (q + 1) * y <= x then q = q + 1 end
  return q
end
local function entry(v)
  local ew, es = string.match(v, '^(%d+) (%d+)$')
  return tonumber(ew), tonumber(es)
end

local sums = redis.call('HMGET', KEYS[1], '#w', '#s')
local W, S = tonumber(sums[1]) or 0, tonumber(sums[2]) or 0
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 64)
for _, id in ipairs(gone) do
  local v = redis.call('HGET', KEYS[1], id)
  if v then
    local ew, es = entry(v)
    W, S = W - ew, S - es
    redis.call('HDEL', KEYS[1], id)
  end
end
if #gone > 0 then redis.call('ZREM', KEYS[2], unpack(gone)) end

local n = redis.call('ZCARD', KEYS[2])
local old = redis.call('HGET', KEYS[1], c)
if old then
  local ew, es = entry(old)
  W, S = W - ew, S - es
else
  n = n + 1
  if n > maxc then
    redis.call('HSET', KEYS[1], '#w', W, '#s', S)
    return {-1, n - 1, S}
  end
end
W = W + w

-- quota.Share
local f = idiv(rate, 10 * (n + 1))
local a = rate - (n + 1) * f
local t
if W > 0 then t = f + idiv(a * w, W) else t = f + idiv(a, n) end
if t > rate - S then t = rate - S end
if t < 0 then t = 0 end

S = S + t
redis.call('HSET', KEYS[1], c, string.format('%d %d', w, t), '#w', string.format('%d', W), '#s', string.format('%d', S))
redis.call('ZADD', KEYS[2], now + ttl, c)
-- The bucket is empty once its newest client expired.
local ms = math.ceil(ttl / 1000)
redis.call('PEXPIRE', KEYS[1], ms)
redis.call('PEXPIRE', KEYS[2], ms)
return {t, n, S}
