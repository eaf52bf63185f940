-- release.lua: hand a lease back without storing anything (the load failed,
-- panicked or timed out), and tell the waiters. Compare-and-delete: a lease
-- is only ever deleted by its holder (or revoked by Delete and Set).
--
-- KEYS[1] lease, KEYS[2] notice channel
-- ARGV[1] lease token
-- ARGV[2] publish command: 'SPUBLISH' or 'PUBLISH'
-- ARGV[3] notice: 'e'..message (the load failed), 'd' (re-check), or ''
--         (publish nothing)
--
-- Reply: 1 released, 0 the token no longer held the lease.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[3] ~= '' then
  redis.call(ARGV[2], KEYS[2], ARGV[3])
end
return 1
