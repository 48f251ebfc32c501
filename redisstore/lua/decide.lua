-- Mirrors memory.Store's decision loop (AllowN and AllowMulti in memory/memory.go, with
-- algo.ExpiresAt): the entry point. For each request, read the key's state, run the algorithm's transcription
-- above (each mirrors one function of internal/algo), and write the new state with a TTL
-- equal to the time until it is equivalent to empty (algo.ExpiresAt), or delete the key when
-- that time has come.
--
-- KEYS: one per request.
-- ARGV[1]: now in µs since the Unix epoch, or "-" to read Redis's clock (TIME).
-- ARGV[2]: the minimum key TTL in ms.
-- ARGV[3...]: groups. Each group is its size g followed by g requests of five fields:
--   algorithm (0 GCRA, 1 TokenBucket, 2 LeakyBucket, 3 FixedWindow, 4 SlidingWindow,
--   5 SlidingLog), rate, period (µs), burst (Limit.EffectiveBurst), cost n.
--   A group of one is an independent decision. A larger group is all or nothing
--   (sluice.MultiLimiter): every request is decided without spending, and only if all are
--   allowed are they decided again, spending (as memory.Store.AllowMulti does).
--   Requests are decided in order, so two
--   requests on one key in one call see each other's spending.
-- Returns four integers per request: allowed (0/1), remaining, resetAfter µs, retryAfter µs.

local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local minttl = tonumber(ARGV[2])

-- cache[key] is a string key's current value, or false when absent, kept up to date by
-- decide's writes. A call deciding several requests reads all their states at once with
-- MGET (one command instead of one GET per request); a single request reads with GET.
-- Sorted-set keys (SlidingLog) are not cached.
local cache = {}
if #KEYS > 1 then
  local strkeys = {}
  local ai, ki = 3, 1
  while ai <= #ARGV do
    local g = tonumber(ARGV[ai])
    for j = 0, g - 1 do
      if ARGV[ai + 1 + 5 * j] ~= '5' then strkeys[#strkeys + 1] = KEYS[ki + j] end
    end
    ai, ki = ai + 1 + 5 * g, ki + g
  end
  for i = 1, #strkeys, 1000 do
    local last = i + 999
    if last > #strkeys then last = #strkeys end
    local vals = redis.call('MGET', unpack(strkeys, i, last))
    for j = i, last do cache[strkeys[j]] = vals[j - i + 1] end
  end
end

local function decide(key, algo, rate, period, burst, n, commit)
  if algo == 5 then
    return sliding_log(key, now, rate, period, n, commit, minttl)
  end
  local a, b, c = 0, 0, 0
  local v = cache[key]
  if v == nil then
    v = redis.call('GET', key)
    cache[key] = v
  end
  if v then a, b, c = decode(v) end
  local T = floor((period + rate - 1) / rate)
  local ok, rem, reset, retry, a2, b2, c2
  if algo == 0 then
    ok, rem, reset, retry, a2 = gcra(a, now, burst, T, n)
    b2, c2 = b, c
  elseif algo == 1 then
    ok, rem, reset, retry, a2, b2 = token_bucket(a, b, now, burst, T, n)
    c2 = c
  elseif algo == 2 then
    ok, rem, reset, retry, a2, b2 = leaky_bucket(a, b, now, burst, T, n)
    c2 = c
  elseif algo == 3 then
    ok, rem, reset, retry, a2, b2 = fixed_window(a, b, now, rate, period, n)
    c2 = c
  else
    ok, rem, reset, retry, a2, b2, c2 = sliding_window(a, b, c, now, rate, period, n)
  end
  -- Like package memory: a key that exists takes the new state whenever it differs (a
  -- window algorithm rolls its window even on a look or a denial); a key is created only
  -- by a decision that spends.
  if commit and (a2 ~= a or b2 ~= b or c2 ~= c) and (v or (ok == 1 and n > 0)) then
    local exp, val
    if algo == 0 then
      exp, val = gcra_expires(a2), sformat('%d', a2)
    elseif algo == 1 then
      exp, val = token_bucket_expires(a2, b2, burst * T), sformat('%d %d', a2, b2)
    elseif algo == 2 then
      exp, val = leaky_bucket_expires(a2, b2), sformat('%d %d', a2, b2)
    elseif algo == 3 then
      exp, val = fixed_window_expires(a2, b2, period), sformat('%d %d', a2, b2)
    else
      exp, val = sliding_full_at(a2, b2, c2, period), sformat('%d %d %d', a2, b2, c2)
    end
    local ttl = ttlms(exp - now, minttl)
    if ttl > 0 then
      redis.call('SET', key, val, 'PX', ttl)
      cache[key] = val
    else
      -- The new state is equivalent to empty: no key at all.
      redis.call('DEL', key)
      cache[key] = false
    end
  end
  return ok, rem, reset, retry
end

local out = {}
local ai, ki = 3, 1
local nargv = #ARGV
while ai <= nargv do
  local g = tonumber(ARGV[ai])
  ai = ai + 1
  if g == 1 then
    local ok, rem, reset, retry = decide(KEYS[ki], tonumber(ARGV[ai]), tonumber(ARGV[ai + 1]),
      tonumber(ARGV[ai + 2]), tonumber(ARGV[ai + 3]), tonumber(ARGV[ai + 4]), true)
    local o = #out
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ok, rem, reset, retry
  else
    local base = #out
    local all = true
    for j = 0, g - 1 do
      local x = ai + 5 * j
      local ok, rem, reset, retry = decide(KEYS[ki + j], tonumber(ARGV[x]), tonumber(ARGV[x + 1]),
        tonumber(ARGV[x + 2]), tonumber(ARGV[x + 3]), tonumber(ARGV[x + 4]), false)
      local o = base + 4 * j
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ok, rem, reset, retry
      if ok == 0 then all = false end
    end
    if all then
      for j = 0, g - 1 do
        local x = ai + 5 * j
        local n = tonumber(ARGV[x + 4])
        if n > 0 then
          local ok, rem, reset, retry = decide(KEYS[ki + j], tonumber(ARGV[x]), tonumber(ARGV[x + 1]),
            tonumber(ARGV[x + 2]), tonumber(ARGV[x + 3]), n, true)
          local o = base + 4 * j
          out[o + 1], out[o + 2], out[o + 3], out[o + 4] = ok, rem, reset, retry
        end
      end
    else
      -- Nothing is spent. A request that would have passed alone reports the state as it
      -- is (a look: Remaining and ResetAfter unspent) with RetryAfter 0.
      for j = 0, g - 1 do
        local o = base + 4 * j
        if out[o + 1] == 1 then
          local x = ai + 5 * j
          local _, rem, reset = decide(KEYS[ki + j], tonumber(ARGV[x]), tonumber(ARGV[x + 1]),
            tonumber(ARGV[x + 2]), tonumber(ARGV[x + 3]), 0, false)
          out[o + 2], out[o + 3], out[o + 4] = rem, reset, 0
        end
        out[o + 1] = 0
      end
    end
  end
  ai = ai + 5 * g
  ki = ki + g
end
return out
