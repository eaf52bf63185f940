-- delete.lua: invalidate a key. Deletes the entry and revokes any lease, so
-- a load that started before the Delete can never commit afterwards, then
-- tells the waiters to re-check ('d').
--
-- KEYS[1] entry hash, KEYS[2] lease, KEYS[3] notice channel
-- ARGV[1] publish command: 'SPUBLISH' or 'PUBLISH'
--
-- Reply: the number of entries deleted (0 or 1).
local n = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
redis.call(ARGV[1], KEYS[3], 'd')
return n
