-- trials.lua: what rights.lua and start.lua share. refusals(key) tries
-- each command corral's scripts run, on the probe key under Prefix, and
-- returns the errors of those Redis refuses to this ACL user, one per
-- command, each ending with the command's name in brackets (empty: all
-- allowed). The probe key is deleted again. A refusal to write (OOM,
-- READONLY) is not about rights, and is left out.
local function refusals(key)
  local errs = {}
  local function try(...)
    local r = redis.pcall(...)
    if type(r) == 'table' and r.err and not string.find(r.err, '^OOM') and not string.find(r.err, '^READONLY') then
      errs[#errs + 1] = r.err .. ' (' .. select(1, ...) .. ')' -- name the command
    end
  end
  try('TIME')
  try('SET', key, '', 'NX', 'PX', 1000)
  try('GET', key)
  try('PTTL', key)
  try('DEL', key)
  try('HSET', key, 'v', '')
  try('HGET', key, 'v')
  try('HMGET', key, 'v')
  try('MGET', key)
  try('HSTRLEN', key, 'v')
  try('HDEL', key, 'v')
  try('EXISTS', key)
  try('PEXPIRE', key, 1000)
  try('DEL', key)
  return errs
end
