-- Mirrors algo.SlidingWindow and algo.slidingFullAt (internal/algo/window.go), and
-- algo.ExpiresAt for SlidingWindow.
-- State: a = the start of the current window, b = the previous window's count, c = the
-- current window's count. Returns allowed, remaining, resetAfter, retryAfter, a', b', c'.
local function sliding_full_at(a, b, c, P)
  if c > 0 then
    return a + 2 * P - floor((P + c - 1) / c)
  elseif b > 0 then
    return a + P - floor((P + b - 1) / b)
  end
  return 0
end

local function sliding_window(a, b, cur, now, rate, P, n)
  local c = cost(n)
  local w = window_start(now, P)
  if w == a + P then
    a, b, cur = w, cur, 0
  elseif w > a + P then
    a, b, cur = w, 0, 0
  end
  local e = nonneg(now - a)
  if e > P - 1 then e = P - 1 end
  local weighted = muldiv(b, P - e - 1, P)
  if weighted + cur + c > rate then
    local at
    local x = rate - cur - c
    if x >= 0 then
      -- Room appears in this window once ⌊prev·(P-e-1)/P⌋ ≤ x.
      at = a + P - muldivceil(x + 1, P, b)
    else
      -- cur alone is too full: wait for the next window, where cur becomes prev.
      at = a + 2 * P - muldivceil(rate - c + 1, P, cur)
    end
    return 0, nonneg(rate - weighted - cur), nonneg(sliding_full_at(a, b, cur, P) - now), at - now, a, b, cur
  end
  if n > 0 then
    cur = cur + c
  end
  return 1, nonneg(rate - weighted - cur), nonneg(sliding_full_at(a, b, cur, P) - now), 0, a, b, cur
end
