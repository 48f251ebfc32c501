-- Mirrors algo.ReserveTokenBucket (internal/algo/reserve.go): reserve_leaky_bucket on the
-- token bucket read the other way up (algo.levelOf: level = burst·U - credit at the same b;
-- 0, 0, a full bucket, stays 0, 0, and the conversion is its own inverse).
-- State: a = credit (1/S µs of refill; one token is U), b = the time of the last spend
-- (token_bucket.lua; in the future while reservations are queued).
-- Returns ok (0/1), delay, at, a', b'.
local function reserve_token_bucket(a, b, now, burst, S, U, n, maxwait)
  local bt = burst * U
  if a ~= 0 or b ~= 0 then a = bt - a end
  local ok, delay, at, na, nb = reserve_leaky_bucket(a, b, now, burst, S, U, n, maxwait)
  if na ~= 0 or nb ~= 0 then na = bt - na end
  return ok, delay, at, na, nb
end
