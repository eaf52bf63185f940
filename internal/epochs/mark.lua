-- mark.lua: record a group invalidation (InvalidateTags, ExpireTags,
-- Clear). An entry born (its field b) at or before a record's epoch is
-- invalidated; every process reads the records it needs at least every
-- coherence bound (internal/epochs).
--
-- KEYS    the records, all in the prefix's slot: for 'c', P:c:{P}; else
--         one P:t:{P}:G per tag G
-- ARGV[1] 'h' hard (InvalidateTags), 's' soft (ExpireTags), 'c' Clear
-- ARGV[2] for a tag: the least a record lives, ms. A record lives as long
--         as the longest-lived entry tagged with it (tagged.lua extends
--         it before such an entry is stored), and at least this long, so
--         that a load under way when it was made finds it when it stores
--
-- A tag's record is "hard,soft" (server microseconds, 0 for none); the Clear's is
-- its epoch alone, and lives for ever (one key per prefix).
--
-- Reply: {now, hard1, soft1, hard2, soft2, ...}: the server clock (us),
-- and each tag's record as written.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- microseconds, as an entry's b
if ARGV[1] == 'c' then
  redis.call('SET', KEYS[1], string.format('%d', now))
  return {now}
end
local out = {now}
for _, k in ipairs(KEYS) do
  local v = redis.pcall('GET', k)
  if type(v) ~= 'string' then
    v = '' -- none, or a key of another type: replaced
  end
  local h, s = string.match(v, '^(%d+),(%d+)$')
  h, s = tonumber(h) or 0, tonumber(s) or 0
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
