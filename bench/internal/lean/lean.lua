-- The yardstick of issue 3's Redis-time target (package lean, lean.go), not a sluice
-- script: it mirrors no function of internal/algo. A minimal integer GCRA on Redis's
-- clock: TIME once per call, then per key a GET of the theoretical arrival time (µs, as
-- decimal text) and a SET with a PX expiry; no state checks, no Remaining or ResetAfter.
-- KEYS: the keys to decide. ARGV: emission interval T (µs), tolerance (burst-1)·T, cost.
-- Returns per key 0 when allowed, the µs to wait when denied.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local T, tol, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 1, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i])) or 0
  if tat < now then tat = now end
  local new = tat + n * T
  if new - now > tol + T then
    out[i] = new - now - tol - T
  else
    redis.call('SET', KEYS[i], new, 'PX', math.ceil((new - now) / 1000))
    out[i] = 0
  end
end
return out
