-- lease.lua: what every script that reads a lease knows of group leases;
-- it is put before fetch, commit, delete and expire.lua.
--
-- A FetchMany holds the leases of its keys as one: its keys of one Cluster
-- slot (off a Cluster, all of them) share a group lease, P:b:{S}:id (S a
-- hash tag of that slot, id the batch's), whose value is the batch's token
-- and whose PX is LeaseTTL. Each key's own lease P:l:{T}:K holds
-- token@group (the name of that group lease) with a longer PX, renewed
-- only when its batch outlasts half of that: it lives while its group
-- does. So the batch's process renews one
-- lease per slot, not one per key (renew.lua, on the group's name), and a
-- key's lease dies with its group when that process does.
--
-- groupOf returns the group lease a lease value names, or nil: a value
-- token@P:b:{S}:id names one (a token holds no '@').
local function groupOf(v)
  if type(v) ~= 'string' then
    return nil
  end
  local at = string.find(v, '@', 1, true)
  if not at or not string.find(v, ':b:{', at, true) then
    return nil
  end
  return string.sub(v, at + 1)
end

-- alive returns v, a lease's value (GET), or false when it names a group
-- lease that is gone: the lease is then as good as expired.
local function alive(v)
  local g = groupOf(v)
  if g and redis.call('EXISTS', g) == 0 then
    return false
  end
  return v
end

-- leasePTTL returns how long the lease at lkey lives (PTTL): its group's
-- life, for a lease that names one.
local function leasePTTL(lkey)
  local g = groupOf(redis.call('GET', lkey))
  if g then
    return redis.call('PTTL', g)
  end
  return redis.call('PTTL', lkey)
end

