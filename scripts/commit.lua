-- commit.lua: store a value and wake the waiters.
--
-- With a token (a load's commit) it stores only while that token still holds
-- the lease: a lease revoked by Delete or Set, or expired and taken by
-- another caller, rejects the commit, so a load that started before a write
-- can never overwrite it (the lease check of Nishtala et al., "Scaling
-- Memcache at Facebook", NSDI 2013). With an empty token (Set) it always
-- stores. Either way it deletes the lease and publishes a notice. The entry
-- keeps the token in t, so a commit sent again (its first reply was lost)
-- learns that it landed.
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
--
-- Reply: {status, notice error}: status 1 stored (now, or by an earlier
-- try of this commit), 0 rejected (the token no longer holds the lease), -1
-- refused (Redis refuses writes: OOM, a replica; the entry is left as it
-- was, the lease handed back, and waiters get the value inline or are told
-- to load it themselves). The notice error is false, or why publishing the
-- notice failed (NOPERM without channel rights): the write stands anyway.
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then
  if redis.call('HGET', KEYS[1], 't') == ARGV[1] then
    return {1, false}
  end
  return {0, false}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local compressed = string.find(ARGV[3], 'z', 1, true)
local field, other = 'v', 'z'
if compressed then
  field, other = 'z', 'v'
end
-- HSET first: a refused write leaves the entry as it was.
local set = redis.pcall('HSET', KEYS[1], field, ARGV[2], 's', now + tonumber(ARGV[4]),
  'd', ARGV[6], 'f', ARGV[3], 't', ARGV[1], 'c', ARGV[9])
local status = 1
if type(set) == 'table' and set.err then
  status = -1
else
  redis.call('HDEL', KEYS[1], other)
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
end
redis.call('DEL', KEYS[2])

-- Notice: 'n' not found, 'e'..message a failure, 'v'..value inline,
-- 'c' committed (read the entry: too large to inline, or compressed), 'l'
-- not stored (refused), and too large to inline: load it yourself.
local notice = 'c'
if ARGV[3] == 'n' then
  notice = 'n'
elseif ARGV[3] == 'e' then
  notice = 'e' .. ARGV[2]
elseif not compressed and #ARGV[2] <= tonumber(ARGV[8]) then
  notice = 'v' .. ARGV[2]
elseif status == -1 then
  notice = 'l'
end
local pub = redis.pcall(ARGV[7], KEYS[3], notice)
if type(pub) == 'table' and pub.err then
  return {status, pub.err}
end
return {status, false}
