-- delete.lua: invalidate a key. Deletes the entry and revokes any lease, so
-- a load that started before the Delete can never commit afterwards, then
-- tells the waiters to re-check ('d').
--
-- KEYS[1] entry hash, KEYS[2] lease, KEYS[3] notice channel
-- ARGV[1] publish command: 'SPUBLISH' or 'PUBLISH'
--
-- Reply: {deleted, notice error}: the number of entries deleted (0 or 1),
-- and false, or why publishing the notice failed (the deletion stands).
local n = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
local pub = redis.pcall(ARGV[1], KEYS[3], 'd')
if type(pub) == 'table' and pub.err then
  return {n, pub.err}
end
return {n, false}
