-- fenced_write.lua: the tests' model of a resource that checks fencing
-- tokens: it refuses a write whose token is smaller than the largest it has
-- accepted, so a holder that lost its lock while paused can't overwrite a
-- newer holder's data. (The same check fits a database row: UPDATE ... SET
-- value = $1, fence = $2 WHERE id = $3 AND fence <= $2.)
--
-- KEYS[1] the resource: a hash with value and fence
-- ARGV[1] the writer's fencing token
-- ARGV[2] the value
--
-- Reply: 1 written, 0 refused (a larger token has written since).
local fence = tonumber(redis.call('HGET', KEYS[1], 'fence')) or 0
if tonumber(ARGV[1]) < fence then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
