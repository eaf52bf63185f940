-- peekread.lua: read.lua and a peek of an entry in one script, for a
-- server that holds every key (one node, not a Cluster): the records, the
-- clock they are on, and the entry's fields, in one command where read.lua
-- and the peek's HMGET are two (Records.ReadBeside). It defines
-- peekread(entry, fields), which peekRead runs as peekread(#KEYS, ARGV) and
-- peekstart.lua with a first peek's start.
--
-- KEYS    P:c:{P}, then the tags' records P:t:{P}:G, then the entry
--         (KEYS[entry]): a proxy that shards keys by a command's first
--         key without refusing a script over several sends it to the
--         records' node, where the entry reads as missing, and fetch.lua,
--         sent by the entry, decides; never the records read as missing
-- fields  the entry's fields to read
--
-- Reply: {now, records, fields}: the clock in microseconds, MGET's values
-- of the records, HMGET's values of the fields.
local function peekread(entry, fields)
  local t = redis.call('TIME')
  local records = {}
  for i = 1, entry - 1 do
    records[i] = KEYS[i]
  end
  return {string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])),
    redis.call('MGET', unpack(records)), redis.call('HMGET', KEYS[entry], unpack(fields))}
end
