-- Mirrors algo.LeakyBucket (internal/algo/bucket.go), and algo.ExpiresAt for LeakyBucket.
-- State: a = X, the level (µs of work), b = LCT, the last conformance time.
-- Returns allowed, remaining, resetAfter, retryAfter, a', b'.
local function leaky_bucket(a, b, now, burst, T, n)
  local c = cost(n)
  local bt = burst * T
  local last = b
  if last < now then last = now end
  local level = nonneg(a - nonneg(now - b))
  local wait = last - now
  local need = c * T
  if level + need > bt then
    return 0, floor((bt - level) / T), wait + level, wait + level + need - bt, a, b
  end
  if n > 0 then
    level = level + need
    a, b = level, last
  end
  return 1, floor((bt - level) / T), wait + level, 0, a, b
end

local function leaky_bucket_expires(a, b)
  return b + a
end
