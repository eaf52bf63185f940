-- read.lua: read an entry without taking a lease (Get).
--
-- KEYS[1] entry hash (see fetch.lua)
-- ARGV[1] largest payload, bytes, to send with the reply; a larger one is
--         announced by its size and read separately (HMGET)
--
-- Reply: {v, f, b, g, w}, v the payload (field v, or z when f has 'z') or
-- its size (an integer) when over ARGV[1], b and g the entry's (fetch.lua),
-- w 1 when the entry has a stale window (it outlives its soft expiry by more
-- than a millisecond, as fetch.lua's STALE asks) and 0 when not; or false
-- when there is no entry, or no payload this release knows.
local f = redis.pcall('HGET', KEYS[1], 'f')
if type(f) == 'table' and f.err then
  if string.find(f.err, '^WRONGTYPE') then
    return false -- a key of another type at the entry's name: no entry (fetch.lua)
  end
  error(f)
end
if not f or string.find(f, '[^nezx]') then
  return false -- no entry, or one in a format this release does not know
end
local field = 'v'
if string.find(f, 'z', 1, true) then
  field = 'z'
end
local size = redis.call('HSTRLEN', KEYS[1], field)
local b = redis.call('HGET', KEYS[1], 'b') or false
local g = redis.call('HGET', KEYS[1], 'g') or false
local w = 0
local soft = tonumber(redis.call('HGET', KEYS[1], 's'))
if soft then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('PTTL', KEYS[1]) > soft - now + 1 then
    w = 1
  end
end
if size > tonumber(ARGV[1]) then
  return {size, f, b, g, w}
end
local v = redis.call('HGET', KEYS[1], field)
if not v then
  return false
end
return {v, f, b, g, w}
