-- Mirrors algo.SlidingLog (internal/algo/log.go) on a sorted set: one member per admitted
-- unit, scored by its timestamp (µs). Members are "<timestamp>:<j>", j counting the units
-- that share the timestamp, so that equal timestamps stay distinct. The key's TTL is the
-- time until its newest timestamp leaves the window; expired members are removed at every
-- decision (ZREMRANGEBYSCORE), and Redis deletes the key when the last one goes.
-- The arguments and results of gcra in gcra.lua; v is unused (the log is not a string).
local function sliding_log(key, v, rate, P, burst, n, commit)
  local c = cost(n)
  -- Log.expire: drop the timestamps at or before now-Period.
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - P))
  local held = redis.call('ZCARD', key)
  local newest = 0
  if held > 0 then
    newest = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
  end
  if held + c > rate then
    local i = int(held + c - rate - 1)
    local oldest = tonumber(redis.call('ZRANGE', key, i, i, 'WITHSCORES')[2])
    local reset = 0
    if held > 0 then reset = nonneg(newest + P - now) end
    return 0, nonneg(rate - held), reset, oldest + P - now
  end
  if n > 0 and commit then
    local t = now
    if newest > t then t = newest end
    local ts = int(t)
    local j = redis.call('ZCOUNT', key, ts, ts)
    -- ZADD in chunks: unpack is bounded by Lua's C stack.
    local i = 0
    while i < c do
      local args = {}
      local last = i + 500
      if last > c then last = c end
      for k = i, last - 1 do
        args[#args + 1] = ts
        args[#args + 1] = ts .. ':' .. int(j + k)
      end
      redis.call('ZADD', key, unpack(args))
      i = last
    end
    held = held + c
    newest = t
    redis.call('PEXPIRE', key, int(ttlms(newest + P - now)))
  end
  local reset = 0
  if held > 0 then reset = nonneg(newest + P - now) end
  return 1, rate - held, reset, 0
end
