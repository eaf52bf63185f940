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
-- Any number of leases at once (the Watchdog renews a Cache's leases
-- together): KEYS and ARGV hold each lease's in turn, KEYS 2 per lease,
-- ARGV 5 per lease; on a Cluster every key of one call is in one slot.
--
-- KEYS[i] lease, KEYS[i+1] entry hash
-- ARGV[j] lease token
-- ARGV[j+1] LeaseTTL, ms
-- ARGV[j+2] deadline, server ms: a renewal that reaches the server later
--           than this (delayed in a paused or slow server) must not extend
--           the lease, since its sender has already given up on it
-- ARGV[j+3] the lease's deadline, server ms: it cannot have expired before
--           (its last renewal's time, at the earliest, plus LeaseTTL)
-- ARGV[j+4] the soft expiry (field s) of the entry when the lease was
--           taken, '' for none
--
-- Reply: one per lease, in order: 1 renewed, 2 renewed after finding the
-- lease missing (taken again), 0 the token no longer holds the lease, -1
-- too late, or the error of a lease Redis refuses to take again (OOM): that
-- renewal is tried again.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function renew(lkey, ekey, token, ttl, deadline, held, seen)
  if now > tonumber(deadline) then
    return -1
  end
  local lease = redis.call('GET', lkey)
  if lease == token then
    redis.call('PEXPIRE', lkey, ttl)
    return 1
  end
  if lease or now >= tonumber(held) then
    return 0
  end
  local soft = redis.pcall('HGET', ekey, 's') -- WRONGTYPE: another type's key is no entry
  if type(soft) == 'table' then
    soft = nil
  end
  if tonumber(soft) ~= tonumber(seen) then
    return 0
  end
  local ok = redis.pcall('SET', lkey, token, 'NX', 'PX', ttl)
  if type(ok) == 'table' and ok.err then
    return ok
  end
  return 2
end

local replies = {}
for i = 1, #KEYS / 2 do
  local k, a = 2 * i - 1, 5 * i - 4
  replies[i] = renew(KEYS[k], KEYS[k + 1], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4])
end
return replies
