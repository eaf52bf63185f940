-- renew.lua: extend a lease, only for its holder and only in time.
--
-- A lease found missing before its deadline (ARGV[4]) was evicted (Redis
-- under maxmemory: volatile-ttl evicts it first, having the shortest TTL),
-- or lost in a failover to a replica that never saw it: not revoked, since
-- Delete and Set revoke with a marker (delete.lua). Its holder takes it
-- again, so that it keeps it and its commit stands, provided the entry is
-- still the one the lease was taken over (as commit.lua checks): a changed
-- entry means that a newer holder or a Set stored meanwhile. Past the
-- deadline a missing lease may be an expired marker: lost, as one that
-- holds another token or a marker.
--
-- KEYS[1] lease, KEYS[2] entry hash
-- ARGV[1] lease token
-- ARGV[2] LeaseTTL, ms
-- ARGV[3] deadline, server ms: a renewal that reaches the server later than
--         this (delayed in a paused or slow server) must not extend the
--         lease, since its sender has already given up on it
-- ARGV[4] the lease's deadline, server ms: it cannot have expired before
--         (its last renewal's time, at the earliest, plus LeaseTTL)
-- ARGV[5] the soft expiry (field s) of the entry when the lease was taken,
--         '' for none
--
-- Reply: 1 renewed, 2 renewed after finding the lease missing (taken
-- again), 0 the token no longer holds the lease, -1 too late. A lease Redis
-- refuses to take again (OOM) is an error: the renewal is tried again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(ARGV[3]) then
  return -1
end
local lease = redis.call('GET', KEYS[1])
if lease == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if lease or now >= tonumber(ARGV[4]) then
  return 0
end
local soft = redis.pcall('HGET', KEYS[2], 's') -- WRONGTYPE: another type's key is no entry
if type(soft) == 'table' then
  soft = nil
end
if tonumber(soft) ~= tonumber(ARGV[5]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
return 2
