-- reclaim.lua: delete an entry a Clear invalidated (Cache.Clear's
-- background sweep), so that cleared entries nobody reads again do not
-- wait for their TTL under noeviction.
--
-- KEYS[1] entry hash
-- ARGV[1] the Clear's epoch, server microseconds: an entry born (field b) at or
--         before it, or without b (an earlier release's), is deleted
--
-- Reply: 1 deleted, 0 kept (born later, or not an entry).
local b = redis.pcall('HGET', KEYS[1], 'b')
if type(b) == 'table' then
  return 0 -- a key of another type: not corral's
end
if (tonumber(b) or 0) <= tonumber(ARGV[1]) then
  return redis.call('DEL', KEYS[1])
end
return 0
