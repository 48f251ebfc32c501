-- sync.lua: one node's reconciliation of one (identity, Limit) in global mode
-- (region.Global.sync). It allocates shares and keeps no bucket: each node runs its share
-- through internal/algo's TokenBucket (region/global.go). It runs in Redis so that every
-- grant is made atomically against every other node's effective share.
--
-- KEYS[1]: the hash of the limit's global state: one field per node, "e g d seen" (the
--   effective share in ppm: the most that node may be applying; its last grant; its demand
--   in milli-units per second; the Redis time it last synced, µs), and "_w" "_c" "_p" (the
--   current usage window's index, units admitted in it, units admitted in the previous one).
-- ARGV[1]: node id. ARGV[2]: the share (ppm) the node applies while this call is in flight.
-- ARGV[3]: units requested since its last sync (admitted or not). ARGV[4]: units admitted.
-- ARGV[5]: µs since its last sync. ARGV[6]: record lease, µs: a node not heard from for that
--   long has stopped applying its share (it fences itself sooner) and its record is dropped.
-- ARGV[7]: rate. ARGV[8]: period µs. ARGV[9]: time to fill the bucket at the full rate
--   (Burst·T) µs. ARGV[10]: now µs, or "-" for TIME.
-- Returns: grant (ppm), fresh (1 when no node held any share: the global bucket is full),
-- units admitted in the current and previous window, and the number of live nodes.
--
-- Invariant: the sum of every live node's e is at most 1e6. A node applies at most its e:
-- a grant raises e before the node hears of it; a lower grant lowers e only at the node's
-- next sync, when it reports the share it applied meanwhile.

local POOL = 1000000
local node = ARGV[1]
local applied = tonumber(ARGV[2])
local demand, admitted = tonumber(ARGV[3]), tonumber(ARGV[4])
local epoch = tonumber(ARGV[5])
local lease = tonumber(ARGV[6])
local rate, period, fill = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local now = tonumber(ARGV[10])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local key = KEYS[1]
local floor = math.floor

local flat = redis.call('HGETALL', key)
local fresh = 1
if #flat > 0 then fresh = 0 end

local nodes, order = {}, {}
local win, cur, prev = 0, 0, 0
for i = 1, #flat, 2 do
  local f, v = flat[i], flat[i + 1]
  if f == '_w' then win = tonumber(v)
  elseif f == '_c' then cur = tonumber(v)
  elseif f == '_p' then prev = tonumber(v)
  else
    local e, g, d, seen = string.match(v, '^(%-?%d+) (%-?%d+) (%-?%d+) (%-?%d+)$')
    e, g, d, seen = tonumber(e), tonumber(g), tonumber(d), tonumber(seen)
    if seen and now - seen <= lease then
      nodes[f] = {e = e, g = g, d = d}
      order[#order + 1] = f
    else
      redis.call('HDEL', key, f)
    end
  end
end

-- Usage, for reporting: units admitted per window of one period, by the time they are
-- reported.
local w = floor(now / period)
if w ~= win then
  if w == win + 1 then prev = cur else prev = 0 end
  cur, win = 0, w
end
cur = cur + admitted

-- This node's demand, in milli-units per second: the last epoch's, averaged over about
-- 50ms when epochs are shorter (a few requests per epoch are a noisy sample).
if epoch < 1000 then epoch = 1000 end
if demand > 1000000 then demand = 1000000 end
local me = nodes[node]
if not me then
  me = {e = 0, g = 0, d = -1}
  nodes[node] = me
  order[#order + 1] = node
end
local sample = floor(demand * 1000000000 / epoch)
if me.d < 0 or epoch >= 50000 then
  me.d = sample
else
  me.d = floor(me.d + (sample - me.d) * epoch / 50000)
end

-- Targets: max-min fair shares of the pool by demand (each node's need is its demand as a
-- fraction of the rate, plus 10% headroom); what is left is split equally.
local full = rate * 1000000000 / period -- the limit in milli-units per second
local need, total = {}, 0
for _, id in ipairs(order) do
  local x = floor(nodes[id].d * 1.1 * POOL / full)
  if x > POOL then x = POOL end
  need[id] = x
  total = total + x
end
local target = {}
if total <= POOL then
  local spare = floor((POOL - total) / #order)
  for _, id in ipairs(order) do target[id] = need[id] + spare end
else
  local sorted = {}
  for _, id in ipairs(order) do sorted[#sorted + 1] = id end
  table.sort(sorted, function(a, b) return need[a] < need[b] end)
  local left, k = POOL, #sorted
  for i, id in ipairs(sorted) do
    local level = floor(left / (k - i + 1))
    local x = need[id]
    if x > level then x = level end
    target[id] = x
    left = left - x
  end
end

-- The grant: the target, within what the other nodes' effective shares leave free.
local others = 0
for _, id in ipairs(order) do
  if id ~= node then others = others + nodes[id].e end
end
local grant = target[node]
if grant > POOL - others then grant = POOL - others end
if grant < 0 then grant = 0 end
local eff = applied
if grant > eff then eff = grant end
me.e, me.g = eff, grant

redis.call('HSET', key, node, string.format('%d %d %d %d', me.e, me.g, me.d, now),
  '_w', string.format('%d', win), '_c', string.format('%d', cur), '_p', string.format('%d', prev))
redis.call('PEXPIRE', key, floor((lease + fill) / 1000) + 1)
return {grant, fresh, cur, prev, #order}
