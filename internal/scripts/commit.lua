-- commit.lua: store a value and wake the waiters.
--
-- With a token (a load's commit) it stores only while that token still holds
-- the lease: a lease revoked by Delete or Set, or expired and taken by
-- another caller, rejects the commit, so a load that started before a write
-- can never overwrite it (the lease check of Nishtala et al., "Scaling
-- Memcache at Facebook", NSDI 2013). With an empty token (Set) it always
-- stores. The entry keeps the token in t, so a commit sent again (its first
-- reply was lost) learns that it landed.
--
-- Eviction is not revocation. Under maxmemory, Redis may evict the lease
-- while its load runs (volatile-ttl evicts it first: it has the shortest
-- TTL); so may a failover to a replica that never saw it. Delete and Set
-- revoke with a marker, never by deleting (delete.lua), so a lease found
-- missing before its holder's deadline (ARGV[11]) was not revoked: the
-- commit stands, provided the entry is the one the holder's lease was
-- taken over (its soft expiry s is ARGV[12]; '' for no entry). A changed
-- entry means a newer holder (which took a fresh lease after the eviction)
-- or a Set stored in between: the commit is rejected, so an eviction costs
-- at most one extra load, never an older value over a newer one. Past the
-- deadline a missing lease may be an expired marker: rejected, as before.
-- A FetchMany's lease is a group's member (lease.lua), and is not taken
-- for evicted: its group's renewals, not its own, make its deadline, which
-- a revocation does not stop.
--
-- Then a load's commit deletes its lease, and a Set revokes any lease as
-- Delete does: the marker 'backoff' for the larger of LeaseTTL and the
-- lease's PTTL (see delete.lua, also for why the lease is deleted first).
-- Either way it publishes a notice.
--
-- KEYS[1] entry hash, KEYS[2] lease, KEYS[3] notice channel
-- ARGV[1] lease token, or '' for an unconditional write
-- ARGV[2] payload
-- ARGV[3] flags: '' (a value), 'n' (negative entry: not found) or 'e' (a
--         cached load failure, its message in ARGV[2]; Options.ErrorTTL);
--         with 'z' added, the payload is S2-compressed and goes in field z
--         instead of v (a release that knows only v sees no entry)
-- ARGV[4] soft TTL, ms
-- ARGV[5] hard TTL, ms (soft TTL + stale window)
-- ARGV[6] duration of the load, ms
-- ARGV[7] publish command: 'SPUBLISH' or 'PUBLISH'
-- ARGV[8] notice inline limit, bytes
-- ARGV[9] codec version (Options.CodecVersion), stored in field c
-- ARGV[10] LeaseTTL, ms (how long a Set's revocation marker lives, at least)
-- ARGV[11] the lease's deadline, server ms: it cannot have expired before
--          (its last renewal's time, at the earliest, plus LeaseTTL); ''
--          when the token must hold the lease
-- ARGV[12] the soft expiry (field s) of the entry when the lease was taken,
--          '' for none
-- ARGV[13] the latest soft expiry the entry may get, server ms (a TTL the
--          loader set, counted from when it returned, not from when the
--          commit arrives); '' or absent for none. The stale window follows.
-- ARGV[14] when the load began (a Set: when it ran), microseconds on the
--          clock of the node of the prefix's records (field b, against
--          which group invalidations are checked); '' for this script's own
--          clock (one node: the records' node)
-- ARGV[15] the tags, parted by a NUL byte (field g); '' for none
--
-- Reply: {status, notice error, refusal}: status 1 stored (now, or by an earlier
-- try of this commit), 2 stored although the lease was missing (evicted),
-- 0 rejected (the token no longer holds the lease), -1 refused (Redis
-- refuses writes: OOM, a replica; the entry is left as it was, the lease
-- handed back, and waiters get the value inline or are told to load it
-- themselves). The notice error is false, or why publishing the notice
-- failed (NOPERM without channel rights): the write stands anyway. The
-- refusal is false, or Redis's error when it refused to write (status -1).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A key of another type at the entry's name (fetch.lua; WRONGTYPE) is no
-- entry: it is replaced (deleted before the HSET, pcall: a replica refuses
-- the DEL, and the HSET's refusal then says so). written is the token of
-- the commit that wrote the entry (field t).
local written = redis.pcall('HGET', KEYS[1], 't')
local foreign = false
if type(written) == 'table' and written.err then
  if not string.find(written.err, '^WRONGTYPE') then
    error(written)
  end
  foreign, written = true, false
end

-- evicted reports whether a lease that does not hold the token (lease, the
-- value GET read) was evicted, with nothing stored since it was taken.
local function evicted(lease)
  if lease or ARGV[11] == '' or now >= tonumber(ARGV[11]) then
    return false -- held by another, or a marker; or past the deadline
  end
  local soft = nil -- a key of another type is no entry
  if not foreign then
    soft = tonumber(redis.call('HGET', KEYS[1], 's'))
  end
  return soft == tonumber(ARGV[12])
end

local status = 1
if ARGV[1] ~= '' then
  local lease = redis.call('GET', KEYS[2])
  if lease ~= ARGV[1] then
    if written == ARGV[1] then
      return {1, false} -- an earlier try of this commit landed
    end
    -- A group's member (lease.lua) stands on its own lease alone: found
    -- missing, it may have been revoked while its group lived on, so it
    -- is not taken for evicted. Still there, it stands even when its group
    -- is gone: nobody revoked or took it over.
    if groupOf(ARGV[1]) or not evicted(lease) then
      return {0, false}
    end
    status = 2
  end
end

local compressed = string.find(ARGV[3], 'z', 1, true)
local field, other = 'v', 'z'
if compressed then
  field, other = 'z', 'v'
end
if foreign then
  redis.pcall('DEL', KEYS[1])
end
-- HSET first: a refused write leaves the entry as it was.
local expiry = now + tonumber(ARGV[4])
local capped = ARGV[13] ~= nil and ARGV[13] ~= '' and tonumber(ARGV[13]) < expiry
if capped then
  expiry = tonumber(ARGV[13])
end
local born = ARGV[14]
if born == nil or born == '' then
  born = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))
end
local tags = ARGV[15] or ''
local set = redis.pcall('HSET', KEYS[1], field, ARGV[2], 's', expiry,
  'd', ARGV[6], 'f', ARGV[3], 't', ARGV[1], 'c', ARGV[9], 'b', born)
local refusal = false
if type(set) == 'table' and set.err then
  status, refusal = -1, set.err
else
  redis.call('HDEL', KEYS[1], other)
  if tags ~= '' then
    redis.call('HSET', KEYS[1], 'g', tags)
  else
    redis.call('HDEL', KEYS[1], 'g')
  end
  -- The hard expiry: the soft one (capped or not) plus the stale window.
  -- PEXPIRE counts from when it runs, which may be well after the TIME the
  -- soft expiry came from (a foreign key's DEL above, a server held up):
  -- counted from ARGV[5] alone, an entry without a stale window would get
  -- one that long, and be served stale past its TTL. So it counts from
  -- TIME read again. (PEXPIREAT would need a right the README's ACL rule
  -- does not give.)
  local t2 = redis.call('TIME')
  local now2 = tonumber(t2[1]) * 1000 + math.floor(tonumber(t2[2]) / 1000)
  redis.call('PEXPIRE', KEYS[1], expiry + tonumber(ARGV[5]) - tonumber(ARGV[4]) - now2)
end
-- The lease: handed back, or for a Set revoked by a marker. pcall: a
-- replica refuses even a DEL (READONLY), and the reply must still come.
if ARGV[1] ~= '' then
  redis.pcall('DEL', KEYS[2])
else
  local hold = math.max(tonumber(ARGV[10]), leasePTTL(KEYS[2]))
  redis.pcall('DEL', KEYS[2])
  redis.pcall('SET', KEYS[2], 'backoff', 'PX', hold)
end

-- Notice: 'n'..soft expiry not found, 'e'..message a failure,
-- 'f'..value inline (after the soft expiry, b and g:
-- f<s>:<b>:<#g>:<g><value>; a waiter checks b and g against its group
-- invalidations, and gives the value to no caller that joined it after
-- s; a release that knows only 'w' or 'v' fetches again), 'c' committed
-- (read the entry: too large to inline, or compressed), 'l' not stored
-- (refused), and too large to inline: load it yourself.
local soft = string.format('%d', expiry)
local notice = 'c'
if ARGV[3] == 'n' then
  notice = 'n' .. soft
elseif ARGV[3] == 'e' then
  notice = 'e' .. ARGV[2]
elseif not compressed and #ARGV[2] <= tonumber(ARGV[8]) then
  notice = 'f' .. soft .. ':' .. born .. ':' .. #tags .. ':' .. tags .. ARGV[2]
elseif status == -1 then
  notice = 'l'
end
local pub = redis.pcall(ARGV[7], KEYS[3], notice)
if type(pub) == 'table' and pub.err then
  return {status, pub.err, refusal}
end
return {status, false, refusal}
