-- tagged.lua: make sure the records of an entry's tags outlive it, before
-- the entry is stored (a commit of a tagged load, or SetEntry). A record
-- that expired while an entry it concerns lived would forget its
-- invalidation.
--
-- KEYS    the tags' records, P:t:{P}:G (one slot: the prefix's)
-- ARGV[1] how long they must live at least, ms: the entry's hard TTL and a
--         margin for the commit's way
--
-- A missing record is made with no epochs ("0,0"); one that would expire
-- sooner is extended (PEXPIRE GT). Reply: the number of records.
for _, k in ipairs(KEYS) do
  local set = redis.pcall('SET', k, '0,0', 'NX', 'PX', ARGV[1])
  if type(set) == 'table' and set.err then
    return set
  end
  if not set then
    redis.call('PEXPIRE', k, ARGV[1], 'GT')
  end
end
return #KEYS
