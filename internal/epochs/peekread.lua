-- peekread.lua: read.lua and a peek of an entry in one script, for a
-- server that holds every key (one node, not a Cluster): the records, the
-- clock they are on, and the entry's fields, in one command where read.lua
-- and the peek's HMGET are two (Records.ReadBeside).
--
-- KEYS    the entry, then P:c:{P}, then the tags' records P:t:{P}:G
-- ARGV    the entry's fields to read
--
-- Reply: {now, records, fields}: the clock in microseconds, MGET's values
-- of the records, HMGET's values of the fields.
local t = redis.call('TIME')
local records = {}
for i = 2, #KEYS do
  records[i - 1] = KEYS[i]
end
return {string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])),
  redis.call('MGET', unpack(records)), redis.call('HMGET', KEYS[1], unpack(ARGV))}
