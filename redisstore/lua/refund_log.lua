-- Mirrors algo.RefundSlidingLog (internal/algo/refund.go), and algo.Release for the
-- refund of a Concurrency spend (refund_concurrency below), on the sorted set of
-- sliding_log.lua, for one refund (the arguments of refund_gcra in refund_bucket.lua; v is
-- unused). After the expired members go, the n members with the latest timestamps at or
-- before at are removed; of one timestamp t's members "t:0" to "t:k-1", the last names.
-- The key's TTL follows its newest member, as sliding_log.lua sets it.
local function refund_sliding_log(key, v, rate, P, burst, n, at)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - P))
  local left = n
  local hi = int(at)
  while left > 0 do
    local top = redis.call('ZREVRANGEBYSCORE', key, hi, '-inf', 'WITHSCORES', 'LIMIT', '0', '1')
    if #top == 0 then break end
    local ts = int(tonumber(top[2]))
    local k = redis.call('ZCOUNT', key, ts, ts)
    local m = k
    if m > left then m = left end
    -- ZREM in chunks: unpack is bounded by Lua's C stack.
    local j = k - m
    while j < k do
      local names = {}
      local last = j + 500
      if last > k then last = k end
      for i = j, last - 1 do names[#names + 1] = ts .. ':' .. int(i) end
      redis.call('ZREM', key, unpack(names))
      j = last
    end
    left = left - m
    hi = '(' .. ts
  end
  if left < n and redis.call('EXISTS', key) == 1 then
    local newest = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
    redis.call('PEXPIRE', key, int(ttlms(newest + P - now)))
  end
  return v
end

refund[5] = refund_sliding_log

-- Mirrors algo.Release for a lease a decision of concurrency.lua took (burst is its id, as
-- there): the refund of a Concurrency spend frees the lease.
local function refund_concurrency(key, v, rate, P, id, n, at)
  redis.call('ZREM', key, int(id))
  return v
end

refund[6] = refund_concurrency
