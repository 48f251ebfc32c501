-- Mirrors algo.LeakyBucket (internal/algo/bucket.go), and algo.ExpiresAt for LeakyBucket,
-- for one request (the arguments and results of gcra in gcra.lua).
-- State: a = X, the level (µs of work), b = LCT, the last conformance time.
local function leaky_bucket(key, v, rate, period, burst, n, commit)
  local a, b = decode(v)
  local T = floor((period + rate - 1) / rate)
  local c = cost(n)
  local bt = burst * T
  local last = b
  if last < now then last = now end
  local level = nonneg(a - nonneg(now - b))
  local wait = last - now
  local need = c * T
  if level + need > bt then
    return 0, floor((bt - level) / T), wait + level, wait + level + need - bt
  end
  if n > 0 then
    level = level + need
    -- The state changes only when units are spent. ExpiresAt: LCT + level.
    if commit then put(key, spack('<dd', level, last), last + level) end
  end
  return 1, floor((bt - level) / T), wait + level, 0
end
run[2] = leaky_bucket
