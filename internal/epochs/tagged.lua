-- tagged.lua: make sure the records of an entry's tags outlive it, before
-- the entry is stored (a commit of a tagged load, or SetEntry). A record
-- that expired while an entry it concerns lived would forget its
-- invalidation.
--
-- KEYS    P:c:{P}, then the tags' records, P:t:{P}:G (one slot: the
--         prefix's)
-- ARGV[1] how long the tags' records must live at least, ms: the entry's
--         hard TTL and a margin for the commit's way
--
-- A missing tag's record is made with no epochs ("0,0"); one that would
-- expire sooner is extended (PEXPIRE GT). A missing P:c:{P} is made "0,0"
-- too (it lives for ever): from then on, a tag's record or P:c:{P} that a
-- reader finds missing was lost (evicted, deleted by hand), and the reader
-- takes it as unknown (internal/epochs). Reply: the number of tags.
local made = redis.pcall('SET', KEYS[1], '0,0', 'NX')
if type(made) == 'table' and made.err then
  return made
end
for i = 2, #KEYS do
  local k = KEYS[i]
  local set = redis.pcall('SET', k, '0,0', 'NX', 'PX', ARGV[1])
  if type(set) == 'table' and set.err then
    return set
  end
  if not set then
    redis.call('PEXPIRE', k, ARGV[1], 'GT')
  end
end
return #KEYS - 1
