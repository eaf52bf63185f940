-- ttl.lua: a holder asks how long its lock has left.
--
-- KEYS[1] lock (see obtain.lua)
-- ARGV[1] the holder's token
--
-- Reply: {1, pttl} held by ARGV[1], pttl in ms (-1: no expiry, set by
-- something other than this package); {0} not held by ARGV[1].
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return {0}
end
return {1, redis.call('PTTL', KEYS[1])}
