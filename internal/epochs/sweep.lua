-- sweep.lua: the lease of a prefix's sweep of cleared entries (Sweep), so
-- that one process sweeps at a time, and the record of the last Clear
-- swept to the end, so that a sweep cut short (its process closed or
-- crashed, a CLI that exited) is taken up by another.
--
-- KEYS[1] P:s:{P}   the epoch of the last Clear swept to the end
-- KEYS[2] P:s:{P}:l the sweep's lease: its holder's token
-- ARGV[1] 'take', 'hold', 'done' or 'drop' (hand the lease back unfinished)
-- ARGV[2] the Clear's epoch, server microseconds
-- ARGV[3] the sweeper's token
-- ARGV[4] the lease's TTL, ms
--
-- Reply: take: -1 swept already, 1 taken, 0 held by another; the others:
-- 1, or 0 when the lease was lost (done: nothing recorded).
local swept = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local epoch = tonumber(ARGV[2])
if ARGV[1] == 'take' then
  if swept >= epoch then
    return -1
  end
  if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[4]) then
    return 1
  end
  return 0
end
if redis.call('GET', KEYS[2]) ~= ARGV[3] then
  return 0
end
if ARGV[1] == 'hold' then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return 1
end
redis.call('DEL', KEYS[2])
if ARGV[1] == 'done' and epoch > swept then
  redis.call('SET', KEYS[1], ARGV[2])
end
return 1
