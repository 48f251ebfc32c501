-- Mirrors memory.Store.Decide (memory/memory.go): the entry point. Each request runs the
-- function of its algorithm above, which reads the key's state, decides and writes it.
--
-- KEYS: one per request, in order.
-- ARGV[1], ARGV[2]: now and the minimum TTL (prelude.lua).
-- ARGV[3]: the requests, five little-endian doubles each: algorithm (0 the bucket
--   machine, for GCRA, TokenBucket and LeakyBucket alike, 3 FixedWindow, 4 SlidingWindow,
--   5 SlidingLog, 6 Concurrency, 7 a calendar FixedWindow; 1 and 2 are unused), rate,
--   period (µs; for the bucket machine S and U of algo.Params instead; a Concurrency
--   limit's lease; a calendar limit's index into ARGV[7]), burst (store.EffectiveBurst; for
--   Concurrency the id of the lease to take), cost n.
-- ARGV[4]: absent or empty, or the all-or-nothing groups (sluice.Limiter.Decide), two
--   little-endian doubles each, in ascending order: the index of the group's first request
--   and the number of its requests (at least 2). A group is decided without spending,
--   and only if all its requests are allowed are they decided again, spending.
-- ARGV[5]: absent or "0" when every key is distinct, "1" when a key repeats among KEYS
--   (written, in prelude.lua).
-- ARGV[6]: absent or "0", or "1" to append the call's now after the results (below).
-- ARGV[7]: absent, or the calendar bounds of the call's calendar requests
--   (calendar_window.lua).
-- Trailing arguments that hold their defaults are left out (decideArgs in script.go).
-- Returns four integers per request, allowed (0/1), remaining, resetAfter µs and
-- retryAfter µs, as one string of little-endian doubles.
-- one is the function of the one algorithm this script was made with, or nil; run[a]
-- then decides algorithm number a (the line above, made by algoScript in script.go).

-- A call of one request returns its result directly (TestDecideLuaOneKeyAgainstGeneral).
-- A key of another type reads as absent through redis.pcall, as MGET reads it below.
local nkeys = #KEYS
if nkeys == 1 then
  local key = KEYS[1]
  local algo, rate, period, burst, n = sunpack('<ddddd', ARGV[3])
  local v = redis.pcall('GET', key)
  if v and v.err then v = false end -- an error reply; a string's .err is nil (string library)
  local ok, rem, reset, retry = (one or run[algo])(key, v, rate, period, burst, n, true)
  if ARGV[6] == '1' then return spack('<ddddd', ok, rem, reset, retry, now) end
  return spack('<dddd', ok, rem, reset, retry)
end

-- Every state is read at once with MGET (sorted sets read as false), 1000 keys at most
-- per unpack (Lua's C stack).
local vals
if nkeys <= 1000 then
  vals = redis.call('MGET', unpack(KEYS))
else
  vals = {}
  for i = 1, nkeys, 1000 do
    local last = i + 999
    if last > nkeys then last = nkeys end
    local got = redis.call('MGET', unpack(KEYS, i, last))
    for j = i, last do vals[j] = got[j - i + 1] end
  end
end

local reqs, groups = ARGV[3], ARGV[4] or ''
if ARGV[5] == '1' then written = {} end
-- state is the value request i decides on: what an earlier request in this call wrote
-- to its key, else what MGET read.
local function state(i, key)
  if written then
    local v = written[key]
    if v ~= nil then return v end
  end
  return vals[i]
end
local out = {}
local pos, gpos = 1, 1
local gfirst, gsize = 0, 0
if #groups > 0 then gfirst, gsize, gpos = sunpack('<dd', groups, gpos) end

local i = 1
while i <= nkeys do
  if i ~= gfirst then
    local algo, rate, period, burst, n
    algo, rate, period, burst, n, pos = sunpack('<ddddd', reqs, pos)
    local key = KEYS[i]
    local v = vals[i] -- state(i, key), inline on the common path
    if written then
      local w = written[key]
      if w ~= nil then v = w end
    end
    local o = 4 * i
    out[o - 3], out[o - 2], out[o - 1], out[o] = (one or run[algo])(key, v, rate, period, burst, n, true)
    i = i + 1
  else
    local g = {}
    for j = 0, gsize - 1 do
      local r = {sunpack('<ddddd', reqs, pos)}
      pos = r[6]
      g[j] = r
    end
    local all = true
    for j = 0, gsize - 1 do
      local r, key = g[j], KEYS[i + j]
      local v = state(i + j, key)
      local o = 4 * (i + j)
      out[o - 3], out[o - 2], out[o - 1], out[o] = (one or run[r[1]])(key, v, r[2], r[3], r[4], r[5], false)
      if out[o - 3] == 0 then all = false end
    end
    for j = 0, gsize - 1 do
      local r, key = g[j], KEYS[i + j]
      local o = 4 * (i + j)
      if all then
        if r[5] > 0 then
          local v = state(i + j, key)
          out[o - 3], out[o - 2], out[o - 1], out[o] = (one or run[r[1]])(key, v, r[2], r[3], r[4], r[5], true)
        end
      else
        -- Nothing is spent: a request that would have passed alone reports a look.
        if out[o - 3] == 1 then
          local v = state(i + j, key)
          local _, rem, reset = (one or run[r[1]])(key, v, r[2], r[3], r[4], 0, false)
          out[o - 2], out[o - 1], out[o] = rem, reset, 0
        end
        out[o - 3] = 0
      end
    end
    i = i + gsize
    if gpos <= #groups then
      gfirst, gsize, gpos = sunpack('<dd', groups, gpos)
    else
      gfirst = 0
    end
  end
end

-- ARGV[6] (Store.allowAcrossSlots): "1" appends now, which a refund of its spends needs.
if ARGV[6] == '1' then out[#out + 1] = now end
return pack(out)
