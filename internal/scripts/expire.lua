-- expire.lua: expire an entry softly (Expire): as if its soft TTL had
-- passed now. An entry with a stale window is stale from now, for that
-- window (hard expiry less soft expiry), and served stale while one caller
-- refreshes it; an entry without one, or no entry, is deleted. Either way
-- any lease is revoked as delete.lua does (the marker 'backoff', which
-- makes nobody wait: over an entry not flagged x the next caller takes the
-- lease over it), so a refresh under way cannot store what it loaded
-- before, and waiters are told to fetch again.
--
-- KEYS[1] entry hash, KEYS[2] lease, KEYS[3] notice channel
-- ARGV[1] publish command: 'SPUBLISH' or 'PUBLISH'
-- ARGV[2] LeaseTTL, ms: the least the marker lives
--
-- Reply: {1 stale, 0 deleted, notice error}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local soft = redis.pcall('HGET', KEYS[1], 's')
if type(soft) ~= 'string' then
  soft = nil -- no entry, or a key of another type
end
soft = tonumber(soft)
local pttl = redis.call('PTTL', KEYS[1])
local stale = 0
if soft and pttl > 0 then
  local window = now + pttl - soft
  if soft <= now then
    stale = 1 -- stale already
  elseif window > 1 then
    -- PEXPIRE counts from when it runs, PTTL to when it ran: with nothing
    -- between them, a hold-up anywhere in the script leaves the window as
    -- it was (one before PTTL shortens pttl as much as it delays PEXPIRE).
    redis.call('PEXPIRE', KEYS[1], window)
    redis.call('HSET', KEYS[1], 's', string.format('%d', now))
    stale = 1
  end
end
if stale == 0 then
  redis.call('DEL', KEYS[1])
end
local hold = math.max(tonumber(ARGV[2]), leasePTTL(KEYS[2]))
redis.call('DEL', KEYS[2])
redis.pcall('SET', KEYS[2], 'backoff', 'PX', hold)
local pub = redis.pcall(ARGV[1], KEYS[3], 'd')
if type(pub) == 'table' and pub.err then
  return {stale, pub.err}
end
return {stale, false}
