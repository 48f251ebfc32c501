-- Mirrors algo.SlidingWindow and algo.slidingFullAt (internal/algo/window.go), and
-- algo.ExpiresAt for SlidingWindow, for one request (the arguments and results of gcra in
-- gcra.lua).
-- State: a = the start of the current window, b = the previous window's count, c = the
-- current window's count.
local function sliding_full_at(a, b, c, P)
  if c > 0 then
    return a + 2 * P - floor((P + c - 1) / c)
  elseif b > 0 then
    return a + P - floor((P + b - 1) / b)
  end
  return 0
end

-- Mirrors algo.slide: the state moved on to now's window.
local function slide(a, b, c, P)
  local w = window_start(now, P)
  if w == a + P then return w, c, 0 elseif w > a + P then return w, 0, 0 end
  return a, b, c
end

local function sliding_window(key, v, rate, P, burst, n, commit)
  local a0, b0, cur0 = decode(v)
  local a, b, cur = slide(a0, b0, cur0, P)
  local c = cost(n)
  local e = nonneg(now - a)
  if e > P - 1 then e = P - 1 end
  local weighted = muldiv(b, P - e - 1, P)
  local ok, retry
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
    ok, retry = 0, at - now
  else
    if n > 0 then
      cur = cur + c
    end
    ok, retry = 1, 0
  end
  local full = sliding_full_at(a, b, cur, P)
  -- As fixed_window: an existing key takes every change (the windows roll even on a look
  -- or a denial); only a decision that spends creates one. ExpiresAt: slidingFullAt.
  if commit and (a ~= a0 or b ~= b0 or cur ~= cur0) and (v or (ok == 1 and n > 0)) then
    put(key, spack('<ddd', a, b, cur), full)
  end
  return ok, nonneg(rate - weighted - cur), nonneg(full - now), retry
end
