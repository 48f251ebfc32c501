-- Mirrors algo.RefundFixedWindow and algo.RefundSlidingWindow (internal/algo/refund.go),
-- and algo.ExpiresAt for the two, for one refund (the arguments and result of refund_gcra
-- in refund_bucket.lua; rate and P are the limit's rate and period µs).

-- Mirrors algo.RefundFixedWindow. State: a = the window counted, b = its count.
local function refund_fixed_window(key, v, rate, P, burst, n, at)
  local a, b = decode(v)
  if a ~= window_start(at, P) or b == 0 then return v end
  if n > b then b = 0 else b = b - n end
  local exp = 0
  if b > 0 then exp = a + P end
  local val = spack('<dd', a, b)
  put(key, val, exp)
  return val
end

-- Mirrors algo.RefundSlidingWindow. State: a = the current window, b = the previous
-- window's count, c = the current window's (sliding_window.lua).
local function refund_sliding_window(key, v, rate, P, burst, n, at)
  local a, b, c = decode(v)
  local w = window_start(at, P)
  if a == w and c > 0 then
    if n > c then c = 0 else c = c - n end
  elseif a == w + P and b > 0 then
    if n > b then b = 0 else b = b - n end
  else
    return v
  end
  local val = spack('<ddd', a, b, c)
  put(key, val, sliding_full_at(a, b, c, P))
  return val
end

refund[3] = refund_fixed_window
refund[4] = refund_sliding_window
