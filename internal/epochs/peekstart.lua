-- peekstart.lua: a Cache's first peek on one server, which carries what the
-- Cache learns of its server once (start.lua's start, put before this file
-- with peekread.lua's peekread): one command, where a start-up script of
-- its own and the peek were two (Records.ReadBeside, Starter).
--
-- KEYS    peekread.lua's, then the probe key P:probe last
-- ARGV    start's sharded and policy flags, then the entry's fields
--
-- Reply: {now, records, fields, start}: peekread.lua's, then start's.
local fields = {}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
local r = peekread(#KEYS - 1, fields)
r[4] = start(KEYS[#KEYS], ARGV[1], ARGV[2])
return r
