-- Mirrors algo.CalendarWindow (internal/algo/calendar.go) and algo.ExpiresAt for a
-- calendar limit, for one request (the arguments and results of gcra in gcra.lua, except
-- that the period field j is the request's place in ARGV[7]).
-- ARGV[7]: the calendar bounds (algo.Bounds), four little-endian doubles per calendar
--   request of the call, computed by Go around its own clock: four consecutive period
--   starts b0 < b1 < b2 < b3 (Lua cannot do time-zone arithmetic). The request is decided
--   in the period holding the script's now; a now outside [b0, b3) (clocks more than a
--   period apart) is an error, never a guess.
-- State: a = the start of the period counted (µs), b = the units admitted in it, c = its
-- end.
local calbounds = ARGV[7]

local function calendar_window(key, v, rate, j, burst, n, commit)
  local b0, b1, b2, b3 = sunpack('<dddd', calbounds, 32 * (j - 1) + 1)
  if now < b0 or now >= b3 then
    error({err = 'ERR sluice: the server clock is outside the calendar periods around the client clock'})
  end
  local a0, b_0, c0 = decode(v)
  local a, b, c = a0, b_0, c0
  local cc = n
  if cc == 0 then cc = 1 end
  local w, e = b0, b1
  if now >= b2 then
    w, e = b2, b3
  elseif now >= b1 then
    w, e = b1, b2
  end
  if w > a then
    a, b, c = w, 0, e
  end
  local until_end = c - now
  local ok, rem, retry
  if b + cc > rate then
    ok, rem, retry = 0, rate - b, until_end
  else
    if n > 0 then
      b = b + cc
    end
    ok, rem, retry = 1, rate - b, 0
  end
  -- As fixed_window: a key that exists takes the new state whenever it differs; a key is
  -- created only by a decision that spends. ExpiresAt: the period's end, or now when it
  -- holds nothing.
  if commit and (a ~= a0 or b ~= b_0 or c ~= c0) and (v or (ok == 1 and n > 0)) then
    local exp, prev = 0, nil
    if b > 0 then exp = c end
    if b_0 > 0 then prev = c0 end
    put(key, spack('<ddd', a, b, c), exp, prev)
  end
  return ok, rem, until_end, retry
end
