-- refresh.lua: give a held lock a new TTL, only for its holder.
--
-- KEYS[1] lock (see obtain.lua)
-- ARGV[1] the holder's token
-- ARGV[2] TTL, ms
--
-- Reply: 1 refreshed, 0 ARGV[1] does not hold the lock (released, expired,
-- or taken by another holder since); the lock is then left untouched.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
