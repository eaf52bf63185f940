-- read.lua: read the records a process checks entries against (internal/
-- epochs' Mirror), with the clock they are on, in one round trip.
--
-- KEYS    P:c:{P}, then the tags' records P:t:{P}:G (one slot)
--
-- Reply: {now, values}: the clock in microseconds, and MGET's values.
local t = redis.call('TIME')
return {string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])), redis.call('MGET', unpack(KEYS))}
