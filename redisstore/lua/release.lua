-- Mirrors algo.Release (internal/algo/lease.go), for Store.Release: drops the expired
-- leases of the set concurrency.lua keeps, then removes the lease named.
--
-- KEYS[1]: the lease set.
-- ARGV[1], ARGV[2]: now and the minimum TTL (prelude.lua).
-- ARGV[3]: the lease id, in decimal.
-- Returns 1 when the lease was held, 0 when it had expired or was never taken.

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(now))
return redis.call('ZREM', KEYS[1], ARGV[3])
