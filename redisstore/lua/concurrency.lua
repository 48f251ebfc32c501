-- Mirrors algo.Concurrency (internal/algo/lease.go) on a sorted set: one member per lease
-- held, its id in decimal, scored by its expiry (µs). P is the limit's lease (µs) and id,
-- in the place of burst, the id of the lease a commit of cost 1 takes (the client draws it,
-- below 2^53). Expired members (expiry ≤ now) are removed at every decision; the key's TTL
-- is the time until its last lease expires, so Redis deletes it when every lease has.
-- The arguments and results of gcra in gcra.lua; v is unused (the set is not a string).
local function concurrency(key, v, rate, P, id, n, commit)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now))
  local held = redis.call('ZCARD', key)
  local last = 0
  if held > 0 then
    last = tonumber(redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')[2])
  end
  if held + cost(n) > rate then
    local oldest = tonumber(redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2])
    return 0, nonneg(rate - held), nonneg(last - now), nonneg(oldest - now)
  end
  if n > 0 and commit then
    local exp = now + P
    redis.call('ZADD', key, exp, int(id))
    held = held + 1
    if exp > last then last = exp end
    redis.call('PEXPIRE', key, int(ttlms(last - now)))
  end
  return 1, rate - held, nonneg(last - now), 0
end
