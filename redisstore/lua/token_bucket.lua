-- Mirrors algo.TokenBucket (internal/algo/bucket.go), and algo.ExpiresAt for TokenBucket.
-- State: a = credit (µs of refill), b = time of the last spend. The zero state (a key that
-- does not exist) is a full bucket. Returns allowed, remaining, resetAfter, retryAfter, a', b'.
local function token_bucket(a, b, now, burst, T, n)
  local c = cost(n)
  local bt = burst * T
  local credit, last = bt, now
  if a ~= 0 or b ~= 0 then
    last = b
    if last < now then last = now end
    credit = a + nonneg(now - b)
    if credit > bt then credit = bt end
  end
  local wait = last - now
  local need = c * T
  if credit < need then
    return 0, floor(credit / T), wait + bt - credit, wait + need - credit, a, b
  end
  if n > 0 then
    credit = credit - need
    a, b = credit, last
  end
  return 1, floor(credit / T), wait + bt - credit, 0, a, b
end

local function token_bucket_expires(a, b, bt)
  if a == 0 and b == 0 then return 0 end
  return b + bt - a
end
