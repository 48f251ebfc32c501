-- Mirrors algo.CancelReservation (internal/algo/reserve.go): the reservation is undone,
-- restoring its "before" state, only if its instant has not come (now < at) and the key's
-- state is still its "after" state (nothing was spent since). The caller passes only
-- reservations that were OK and spent something.
-- Returns 1 and the restored state, or 0 and the state unchanged.
local function cancel_reservation(a, b, now, at, before_a, before_b, after_a, after_b)
  if now >= at or a ~= after_a or b ~= after_b then
    return 0, a, b
  end
  return 1, before_a, before_b
end
