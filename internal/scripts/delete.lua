-- delete.lua: invalidate a key. Deletes the entry and revokes any lease, so
-- a load that started before the Delete can never commit afterwards, then
-- tells the waiters to re-check ('d').
--
-- Revoking writes a marker into the lease rather than deleting it:
-- commit.lua takes a missing lease for an evicted one, whose holder may
-- still commit (an eviction is not a revocation), so a revoked lease must
-- not look missing. The marker lives as long as the holder's lease could
-- have (the larger of LeaseTTL and the lease's own PTTL), so it outlives
-- every commit the lease check must reject. A marker can be evicted too: a
-- load that started before the Delete may then store its value after it
-- (see the README's "Redis configuration").
--
-- The marker is the word 'backoff', as after a failed refresh (release.lua),
-- which fetch.lua tells apart by the entry: a backoff comes with the entry
-- flagged x, and holds refreshes off; a revocation has no entry, or a Set's,
-- and every caller takes the lease over it at once, never waiting. One word
-- serves both so that the previous release, which takes the lease over
-- 'backoff' on a miss, takes it over a revocation too rather than wait for
-- it during a rolling deploy.
--
-- The lease is deleted before the marker is written: a script that has
-- written is not refused later writes for want of memory (Redis cannot stop
-- a script half-way), so under maxmemory with noeviction the marker still
-- replaces a lease that was there. Without a lease (nor an entry) the marker
-- may be refused: then no holder can be running (noeviction evicts no
-- lease), and nothing is lost.
--
-- An earlier release's Delete only deletes the lease. During a rolling
-- deploy, a load of this release that started before such a Delete, on a
-- key that had no entry, finds its lease missing and commits afterwards:
-- what a Delete guards against, until every instance runs this release.
--
-- KEYS[1] entry hash, KEYS[2] lease, KEYS[3] notice channel
-- ARGV[1] publish command: 'SPUBLISH' or 'PUBLISH'
-- ARGV[2] LeaseTTL, ms
--
-- Reply: {deleted, notice error}: the number of entries deleted (0 or 1),
-- and false, or why publishing the notice failed (the deletion stands).
local n = redis.call('DEL', KEYS[1])
local hold = math.max(tonumber(ARGV[2]), leasePTTL(KEYS[2]))
redis.call('DEL', KEYS[2])
redis.pcall('SET', KEYS[2], 'backoff', 'PX', hold)
local pub = redis.pcall(ARGV[1], KEYS[3], 'd')
if type(pub) == 'table' and pub.err then
  return {n, pub.err}
end
return {n, false}
