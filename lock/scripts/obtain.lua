-- obtain.lua: take a free lock for a new holder and hand it a fencing token.
--
-- KEYS[1] lock     P:l:{T}:K  hash: o (the holder's random token), f (its
--                             fencing token); PX = the lock's TTL
-- KEYS[2] counter  P:f:{T}:K  string: the last fencing token handed out for
--                             K; no expiry, so it outlives every holder
-- ARGV[1] the new holder's token (random, 128 bit, hex)
-- ARGV[2] TTL, ms
--
-- Fencing tokens: the next token is the larger of (the counter + 1) and the
-- server clock in microseconds. While the counter survives, tokens strictly
-- increase whatever the clock does. When it is lost (evicted, a restart
-- without persistence, a failover to a replica that missed writes), the
-- clock still puts the next token above earlier ones, unless the clock of the
-- server issuing it is behind the one that issued them (see the package doc).
-- Both stay below 2^53, so Lua's numbers hold them exactly.
--
-- Replies:
--   {1, fence, pttl}  obtained; also when the lock already holds ARGV[1]:
--                     the client sent this try again after losing its reply
--                     (a dropped connection), and it gets that try's token
--   {0, pttl}         another holder has the lock; pttl is its remaining
--                     time in ms (-1: it has no expiry)
local owner = redis.call('HGET', KEYS[1], 'o')
if owner == ARGV[1] then
  return {1, tonumber(redis.call('HGET', KEYS[1], 'f')), redis.call('PTTL', KEYS[1])}
end
if owner then
  return {0, redis.call('PTTL', KEYS[1])}
end

local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2])) -- server clock, us
local fence
if tonumber(now) > (tonumber(redis.call('GET', KEYS[2])) or 0) then
  redis.call('SET', KEYS[2], now)
  fence = tonumber(now)
else
  fence = redis.call('INCR', KEYS[2])
end
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'f', string.format('%d', fence))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, fence, tonumber(ARGV[2])}
