-- start.lua: what a Cache learns of its server once, as it starts, in one
-- command where it took three: the pub/sub mode, the rights its ACL user
-- lacks (trials.lua, put before this file), and the eviction policy. Run
-- on its own (scripts.Start: start(KEYS[1], ARGV[1], ARGV[2])), or folded
-- into a Cache's first peek on one server (internal/epochs' peekstart.lua).
--
-- start(key, sharded, policy)
--   key      the probe key, Prefix:probe, which is also the probe channel:
--            nobody subscribes to it
--   sharded  '1' to try sharded pub/sub (SPUBLISH) first, '' not to
--            (Options.DisableShardedPubSub)
--   policy   '1' to read the eviction policy (INFO memory), for a client of
--            one server; a Cluster's masters are read one by one elsewhere
--
-- Reply: {publish, refusal, policy, refused}
--   publish  the command an empty message on the probe channel went out
--            with: 'SPUBLISH' or 'PUBLISH'; '' when Redis refused both
--   refusal  Redis's last refusal of a publish, ending with the command's
--            name in brackets; '' for none
--   policy   INFO's maxmemory_policy; '' when not asked for, or refused
--   refused  refusals(key), as rights.lua replies
local function start(key, sharded, policy)
  local publish, refusal = '', ''
  local tries = {'PUBLISH'}
  if sharded == '1' then
    tries = {'SPUBLISH', 'PUBLISH'}
  end
  for _, command in ipairs(tries) do
    local r = redis.pcall(command, key, '')
    if type(r) == 'table' and r.err then
      refusal = r.err .. ' (' .. command .. ')'
    else
      publish, refusal = command, ''
      break
    end
  end
  local read = ''
  if policy == '1' then
    local info = redis.pcall('INFO', 'memory')
    if type(info) == 'string' then
      read = string.match(info, 'maxmemory_policy:([%w-]+)') or ''
    end
  end
  return {publish, refusal, read, refusals(key)}
end
