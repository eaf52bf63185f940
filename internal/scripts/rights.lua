-- rights.lua: try each command corral's scripts run, on a probe key under
-- Prefix, and report the errors of those Redis refuses to this ACL user
-- (see rights.go). The probe key is deleted again. A refusal to write (OOM,
-- READONLY) is not about rights, and is left out.
--
-- KEYS[1] probe key, Prefix:probe
--
-- Reply: the error messages, one per command refused, each ending with the
-- command's name in brackets (empty: all allowed).
local errs = {}
local function try(...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err and not string.find(r.err, '^OOM') and not string.find(r.err, '^READONLY') then
    errs[#errs + 1] = r.err .. ' (' .. select(1, ...) .. ')' -- name the command
  end
end
try('TIME')
try('SET', KEYS[1], '', 'NX', 'PX', 1000)
try('GET', KEYS[1])
try('PTTL', KEYS[1])
try('DEL', KEYS[1])
try('HSET', KEYS[1], 'v', '')
try('HGET', KEYS[1], 'v')
try('HMGET', KEYS[1], 'v')
try('MGET', KEYS[1])
try('HSTRLEN', KEYS[1], 'v')
try('HDEL', KEYS[1], 'v')
try('EXISTS', KEYS[1])
try('PEXPIRE', KEYS[1], 1000)
try('DEL', KEYS[1])
return errs
