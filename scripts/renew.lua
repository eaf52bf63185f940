-- renew.lua: extend a lease, only for its holder and only in time.
--
-- KEYS[1] lease
-- ARGV[1] lease token
-- ARGV[2] LeaseTTL, ms
-- ARGV[3] deadline, server ms: a renewal that reaches the server later than
--         this (delayed in a paused or slow server) must not extend the
--         lease, since its sender has already given up on it
--
-- Reply: 1 renewed, 0 the token no longer holds the lease, -1 too late.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now > tonumber(ARGV[3]) then
  return -1
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
