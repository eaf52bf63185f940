-- release.lua: compare-and-delete. Only the holder's token frees a lock; a
-- stale holder's release (its lock expired and another holder took it)
-- leaves the new holder's lock alone. The fencing counter stays.
--
-- KEYS[1] lock (see obtain.lua)
-- ARGV[1] the holder's token
--
-- Reply: 1 released, 0 ARGV[1] did not hold the lock.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
return 1
