-- Mirrors algo.RefundFixedWindow, algo.RefundSlidingWindow and algo.RefundCalendarWindow
-- (internal/algo/refund.go, calendar.go), and algo.ExpiresAt for the three, for one
-- refund (the arguments and result of refund_gcra in refund_bucket.lua; rate and P are
-- the limit's rate and period µs, P the request's place in ARGV[7] for a calendar).

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

-- Mirrors algo.RefundCalendarWindow. State: a = the period counted, b = its count, c = its
-- end (calendar_window.lua).
local function refund_calendar_window(key, v, rate, j, burst, n, at)
  local a, b, c = decode(v)
  if at < a or at >= c or b == 0 then return v end
  if n > b then b = 0 else b = b - n end
  local exp = 0
  if b > 0 then exp = c end
  local val = spack('<ddd', a, b, c)
  put(key, val, exp)
  return val
end

refund[7] = refund_calendar_window
