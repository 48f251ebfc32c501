-- Mirrors algo.FixedWindow (internal/algo/window.go), algo.windowStart, and algo.ExpiresAt
-- for FixedWindow.
-- State: a = the start of the window counted (µs), b = the units admitted in it.
-- Returns allowed, remaining, resetAfter, retryAfter, a', b'.
local function window_start(now, period)
  return floordiv(now, period) * period
end

local function fixed_window(a, b, now, rate, period, n)
  local c = cost(n)
  local w = window_start(now, period)
  if w > a then
    a, b = w, 0
  end
  local until_end = a + period - now
  if b + c > rate then
    return 0, rate - b, until_end, until_end, a, b
  end
  if n > 0 then
    b = b + c
  end
  local reset = 0
  if b > 0 then reset = until_end end
  return 1, rate - b, reset, 0, a, b
end

local function fixed_window_expires(a, b, period)
  if b == 0 then return 0 end
  return a + period
end
