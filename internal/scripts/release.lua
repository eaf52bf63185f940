-- release.lua: hand a lease back without storing a value (the load failed,
-- panicked or timed out, or a refresh was skipped), and tell the waiters.
-- Compare-and-delete: a lease is only ever deleted by its holder (or revoked
-- by Delete and Set).
--
-- With no entry, the lease is replaced by a revocation marker (the word
-- 'backoff' over no entry, see delete.lua) for the rest of its time, not
-- deleted: it may have been taken over a Delete's marker (fetch.lua takes
-- leases over revocations), and deleting it would leave the lease missing,
-- which commit.lua takes for an eviction, so the load the Delete revoked
-- could still commit. That load's lease deadline comes before this lease's
-- expiry (its lease was taken or last renewed before this one was taken),
-- so the marker outlives it. fetch.lua takes the lease over the marker at
-- once: nobody waits on it. With an entry, the entry's soft expiry already
-- tells such a load that something was stored since its lease was taken.
--
-- KEYS[1] lease, KEYS[2] notice channel, KEYS[3] entry hash
-- ARGV[1] lease token
-- ARGV[2] publish command: 'SPUBLISH' or 'PUBLISH'
-- ARGV[3] notice: 'e'..message (the load failed), 'd' (re-check), or ''
--         (publish nothing)
-- ARGV[4] hold, ms: when > 0, a backoff marker replaces the lease for this
--         long, or until the entry expires if that is sooner, so no caller
--         refreshes the entry meanwhile (Options.ErrorTTL, stale-if-error);
--         0 deletes the lease (or leaves a revocation, as above)
-- ARGV[5] '1' to flag the entry (if any) 'x': its last refresh failed
--
-- Reply: {released, notice error}: 1 released, 0 the token no longer held
-- the lease; false, or why publishing the notice failed.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, false}
end
local hold = tonumber(ARGV[4])
if hold > 0 then
  local left = redis.call('PTTL', KEYS[3])
  if left > 0 and left < hold then
    hold = left
  end
end
local held = false
if hold > 0 and redis.call('EXISTS', KEYS[3]) == 1 then
  local set = redis.pcall('SET', KEYS[1], 'backoff', 'PX', hold)
  held = not (type(set) == 'table' and set.err) -- refused (OOM): no backoff
end
if not held then
  local left = redis.call('PTTL', KEYS[1])
  redis.call('DEL', KEYS[1])
  if left > 0 and redis.call('EXISTS', KEYS[3]) == 0 then
    redis.pcall('SET', KEYS[1], 'backoff', 'PX', left)
  end
end
if ARGV[5] == '1' then
  local f = redis.pcall('HGET', KEYS[3], 'f') -- WRONGTYPE: another type's key is no entry
  if type(f) == 'string' and not string.find(f, 'x', 1, true) then
    redis.pcall('HSET', KEYS[3], 'f', f .. 'x') -- a refused write only loses the flag
  end
end
if ARGV[3] ~= '' then
  local pub = redis.pcall(ARGV[2], KEYS[2], ARGV[3])
  if type(pub) == 'table' and pub.err then
    return {1, pub.err}
  end
end
return {1, false}
