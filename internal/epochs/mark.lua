-- mark.lua: record a group invalidation (InvalidateTags, ExpireTags,
-- Clear). An entry born (its field b) at or before a record's epoch is
-- invalidated; every process reads the records it needs at least every
-- coherence bound (internal/epochs).
--
-- KEYS    the records, all in the prefix's slot: P:c:{P}, then, for a tag
--         invalidation, one P:t:{P}:G per tag G
-- ARGV[1] 'h' hard (InvalidateTags), 's' soft (ExpireTags), 'c' Clear
-- ARGV[2] for a tag: the least a record lives, ms. A record lives as long
--         as the longest-lived entry tagged with it (tagged.lua extends
--         it before such an entry is stored), and at least this long, so
--         that a load under way when it was made finds it when it stores
--
-- Epochs are server microseconds, 0 for none. A tag's record is
-- "hard,soft"; the Clear's is "clear,tags": the epoch of the last Clear,
-- and of the last invalidation of any tag, hard or soft (an entry born
-- after it needs no tag's record), which grows with each (a copy whose
-- tags were found valid under it stays so until it changes). It lives for ever (one key per
-- prefix). An earlier build's Clear record, "clear" alone, reads as no
-- tag invalidation.
--
-- Reply: {now, clear, tags, hard1, soft1, hard2, soft2, ...}: the server
-- clock, the Clear's record and each tag's as written.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- microseconds, as an entry's b

-- record reads a record "a,b" (or "a"); none, or a key of another type
-- (replaced), is 0,0.
local function record(k)
  local v = redis.pcall('GET', k)
  if type(v) ~= 'string' then
    return 0, 0
  end
  local a, b = string.match(v, '^(%d+),?(%d*)$')
  return tonumber(a) or 0, tonumber(b) or 0
end

local c, g = record(KEYS[1])
if ARGV[1] == 'c' then
  c = now
else
  g = math.max(now, g + 1) -- strictly later than the last, whatever the clock did
end
redis.call('SET', KEYS[1], string.format('%d,%d', c, g))
local out = {now, c, g}
for i = 2, #KEYS do
  local k = KEYS[i]
  local h, s = record(k)
  if ARGV[1] == 'h' then
    h = now
  else
    s = now
  end
  local ttl = math.max(redis.call('PTTL', k), tonumber(ARGV[2]))
  redis.call('SET', k, string.format('%d,%d', h, s), 'PX', ttl)
  out[#out + 1] = h
  out[#out + 1] = s
end
return out
