-- Mirrors algo.FixedWindow (internal/algo/window.go) and algo.ExpiresAt for FixedWindow,
-- for one request (the arguments and results of gcra in gcra.lua).
-- State: a = the start of the window counted (µs), b = the units admitted in it.

-- algo.cost, algo.windowStart and the state codec are inline in fixed_window (see
-- gcra.lua): the Envoy service decides with this function.
local function fixed_window(key, v, rate, period, burst, n, commit)
  -- decode(v) (prelude.lua), inline: a Lua call per decision costs more than the check
  local a0, b0 = 0, 0
  if v then
    local l, c0 = #v, 0
    if l == 16 then
      a0, b0 = sunpack('<dd', v)
    elseif l == 8 then
      a0 = sunpack('<d', v)
    elseif l == 24 then
      a0, b0, c0 = sunpack('<ddd', v)
    end
    if not (a0 >= 0 and a0 < 2^53 and a0 % 1 == 0 and b0 >= 0 and b0 < 2^53 and b0 % 1 == 0
        and c0 >= 0 and c0 < 2^53 and c0 % 1 == 0) then
      a0, b0 = 0, 0
    end
  end
  local a, b = a0, b0
  local c = n
  if c == 0 then c = 1 end
  local w = now - now % period -- floor(now / period) * period, exactly, without a call
  if w > a then
    a, b = w, 0
  end
  local until_end = a + period - now
  local ok, rem, reset, retry
  if b + c > rate then
    ok, rem, reset, retry = 0, rate - b, until_end, until_end
  else
    if n > 0 then
      b = b + c
    end
    reset = 0
    if b > 0 then reset = until_end end
    ok, rem, retry = 1, rate - b, 0
  end
  -- Like package memory: a key that exists takes the new state whenever it differs (the
  -- window rolls even on a look or a denial); a key is created only by a decision that
  -- spends. ExpiresAt: the window's end, or now when it holds nothing.
  if commit and (a ~= a0 or b ~= b0) and (v or (ok == 1 and n > 0)) then
    local exp, prev = 0, nil
    if b > 0 then exp = a + period end
    if b0 > 0 then prev = a0 + period end
    put(key, spack('<dd', a, b), exp, prev)
  end
  return ok, rem, reset, retry
end
