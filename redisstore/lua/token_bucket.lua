-- Mirrors algo.TokenBucket (internal/algo/bucket.go), and algo.ExpiresAt for TokenBucket,
-- for one request (the arguments and results of gcra in gcra.lua).
-- State: a = credit (µs of refill), b = time of the last spend. The zero state (a key that
-- does not exist) is a full bucket. algo.cost and algo.nonNeg are inline (see gcra.lua).
local function token_bucket(key, v, rate, period, burst, n, commit)
  local a, b = decode(v)
  local T = floor((period + rate - 1) / rate)
  local c = n
  if c == 0 then c = 1 end
  local bt = burst * T
  local credit, last = bt, now
  if a ~= 0 or b ~= 0 then
    last = b
    if last < now then last = now end
    credit = a
    if now > b then credit = a + now - b end
    if credit > bt then credit = bt end
  end
  local wait = last - now
  local need = c * T
  if credit < need then
    return 0, floor(credit / T), wait + bt - credit, wait + need - credit
  end
  if n > 0 then
    credit = credit - need
    -- The state changes only when units are spent. ExpiresAt: the bucket is full again
    -- once the missing credit has refilled after the last spend.
    if commit then put(key, spack('<dd', credit, last), last + bt - credit) end
  end
  return 1, floor(credit / T), wait + bt - credit, 0
end
run[1] = token_bucket
