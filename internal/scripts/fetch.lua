-- fetch.lua: decide, in one round trip, what a caller of a key does.
--
-- KEYS[1] entry hash  P:e:{T}:K   fields v (payload) or z (compressed
--                                 payload), s (soft expiry, server ms), d (last
--                                 load, ms), f (flags, see commit.lua)
-- KEYS[2] lease       P:l:{T}:K
-- KEYS[3] group lease P:b:{S}:id (a FetchMany's: see lease.lua), in the
--                                 slot of KEYS[1]; absent for none
-- ARGV[1] lease token (random, 128 bit, hex)
-- ARGV[2] LeaseTTL, ms
-- ARGV[3] x = Beta * -ln(U), the caller's XFetch draw; 0 disables early refresh
-- ARGV[4] largest payload, bytes, to send with the reply; a larger one is
--         announced by its size and read separately (HMGET), so a reply that
--         takes long on the wire is one the client expects to
-- ARGV[5] the soft expiry (field s) of an entry the caller could not use (it
--         did not decode): that entry is treated as missing; '' for none
-- ARGV[6] the caller's codec version (Options.CodecVersion), '' for any: an
--         entry written with an older version (field c, 0 when absent) is
--         treated as missing, and reloaded; one written with a newer version
--         is left alone (NEWER)
-- ARGV[7] the soft expiry (field s) of an entry to take as stale: a soft
--         invalidation of one of its tags (ExpireTags) reached it; ''
--         for none. It is served STALE while its hard TTL lasts, the
--         caller refreshing it; without a stale window it is missing
-- ARGV[8] with KEYS[3]: the group lease's token. ARGV[1] is then
--         token@KEYS[3], and a lease taken is the group's member: the group
--         lease is set to live LeaseTTL from now
-- ARGV[9] with KEYS[3]: the PX of a member's own lease, ms (its group's
--         life is what counts; a member held for half of it is renewed on
--         its own)
-- ARGV[10] the caller's echo channel (P:n:I:{T}:K), '' or absent for none:
--         a WAIT publishes an empty message on it, by the caller's token's
--         mark (s SPUBLISH, p PUBLISH), and says how many clients heard it
--
-- HIT and STALE replies end with the entry's b (when its load began, in
-- microseconds on the records' node's clock) and g (its tags), false when
-- absent, which the caller checks against its group invalidations, and us.
--
-- Replies ("now" is the server clock in ms; every decision uses it):
--   {'HIT', v, f, refresh, now, s, b, g, us, 0} fresh entry; refresh = 1 when XFetch
--                                    fired and this caller took the lease,
--                                    -1 when Redis refused to write it (OOM),
--                                    -2 (READONLY: a replica);
--                                    v is the payload, or its size (an
--                                    integer) when it is over ARGV[4]; s its
--                                    soft expiry (server ms)
--   {'STALE', v, f, refresh, now, s, b, g, us, h} past the soft expiry, more than 1 ms
--                                    inside the hard TTL (an entry without a
--                                    stale window is missing once past its
--                                    soft expiry); refresh = 1 when this caller took
--                                    the lease, -1 or -2 when Redis refused it; h
--                                    the hard expiry (server ms)
--   {'NEWER', now, s}                the entry was written with a newer codec
--                                    version: load, and leave it alone
--   {'REFUSED', now, why}          no entry, and Redis refused to write the
--                                  lease (why: -1 OOM, -2 READONLY): nobody
--                                  can hold it
--   {'LOAD',  now, us}             no entry, this caller took the lease (us:
--                                  the clock in microseconds, see below)
--   {'WAIT',  pttl, now, lease, heard} no entry, another caller holds the
--                                  lease (pttl: its group's for a member);
--                                  lease is its token, whose first byte
--                                  says how it will announce the end of its
--                                  load (s SPUBLISH, p PUBLISH, n no notice);
--                                  heard: the clients that heard the echo
--                                  (ARGV[10]), 0 for none: 1 says the
--                                  caller was subscribed to its notices
--                                  before this script ran
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- us: the clock in microseconds, for the entry a lease granted here will
-- write (field b): group invalidations are told apart from loads by it.
local us = string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2]))

-- foreign: a key of another type is at the entry's name (another
-- program's, or a prefix clash; the HMGET below finds out, WRONGTYPE, with
-- no right beyond corral's own). It is no entry: its caller loads, and the
-- commit replaces it.
local foreign = false

local grouped = KEYS[3] ~= nil and ARGV[8] ~= nil and ARGV[8] ~= ''
local px = ARGV[2]
if grouped then
  px = ARGV[9]
end

-- refused returns take's answer for the error of a write (a pcall's
-- reply), or nil when it is none.
local function refused(set)
  if type(set) ~= 'table' or not set.err then
    return nil
  elseif string.find(set.err, '^OOM') then
    return -1
  elseif string.find(set.err, '^READONLY') then
    return -2
  end
  -- Not a refusal to write (an ACL denying SET): the caller's error,
  -- naming the command as rights.lua does.
  error({err = set.err .. ' (SET)'})
end

-- take takes the lease for ARGV[1]: 1 taken, 0 held by another, -1 Redis
-- refuses writes for lack of memory (OOM), -2 as a replica (READONLY); the
-- read goes on. Any other error ends the
-- script with it. A lease that already holds ARGV[1]
-- is this caller's own: its client resent the script after losing the reply
-- (a dropped connection), and must not wait for itself.
local function take(force)
  local cur = redis.call('GET', KEYS[2])
  -- A member of a group lease that is gone (its batch's process died or
  -- stalled) is no lease at all.
  if not force and cur and not alive(cur) then
    force = true
  end
  -- A marker over an entry not flagged x is a revocation (delete.lua), and
  -- stands for no lease at all: taking the lease over it is what keeps
  -- callers from waiting on it. Over a flagged entry it is a backoff after a
  -- failed refresh (release.lua), which holds refreshes off.
  if not force and cur == 'backoff' and
      (foreign or not string.find(redis.call('HGET', KEYS[1], 'f') or '', 'x', 1, true)) then
    force = true
  end
  local set
  if force then
    set = redis.pcall('SET', KEYS[2], ARGV[1], 'PX', px)
  elseif cur ~= ARGV[1] then
    set = redis.pcall('SET', KEYS[2], ARGV[1], 'NX', 'PX', px)
  end
  local no = refused(set)
  if no then
    return no
  end
  if not set and cur ~= ARGV[1] then
    return 0
  end
  -- Taken (or this caller's own already: its client resent the script
  -- after losing the reply, and must not wait for itself). A member's
  -- group lease lives LeaseTTL from now on, at least: made if it was gone,
  -- extended if it was about to go (its batch's other members committed,
  -- and the watchdog, holding none, renews it no more), so that a member
  -- granted late does not lapse with it before its first renewal.
  if grouped then
    no = refused(redis.pcall('SET', KEYS[3], ARGV[8], 'PX', ARGV[2]))
    if no then
      redis.pcall('DEL', KEYS[2])
      return no
    end
  end
  return 1
end

-- The payload is in v, or compressed in z (flag 'z'). An entry without its
-- payload field, or with a flag this release does not know (n, e, z and x
-- are known), is in a format of another release, and no entry here: its
-- caller loads, and the commit replaces it.
local e = redis.pcall('HMGET', KEYS[1], 's', 'd', 'f', 'c', 'b', 'g')
if type(e) == 'table' and e.err then
  if not string.find(e.err, '^WRONGTYPE') then
    error(e)
  end
  foreign, e = true, {}
end
local soft = tonumber(e[1])
local f = e[3] or ''
local v = false
if soft and ARGV[6] ~= '' then
  local version, mine = tonumber(e[4]) or 0, tonumber(ARGV[6])
  if version > mine then
    return {'NEWER', now, soft}
  elseif version < mine then
    soft = nil
  end
end
if soft and (e[1] == ARGV[5] or string.find(f, '[^nezx]')) then
  soft = nil
end
if soft then
  local field = 'v'
  if string.find(f, 'z', 1, true) then
    field = 'z'
  end
  local size = redis.call('HSTRLEN', KEYS[1], field)
  if size > tonumber(ARGV[4]) then
    v = size
  else
    v = redis.call('HGET', KEYS[1], field)
  end
end
local b, g = e[5] or false, e[6] or false
if v and soft and ARGV[7] ~= '' and e[1] == ARGV[7] and now < soft then
  -- Soft-invalidated: stale now, if the entry has a stale window.
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > soft - now + 1 then
    return {'STALE', v, f, take(), now, soft, b, g, us, now + pttl}
  end
  v = false
end
if v then
  if now < soft then
    local x = tonumber(ARGV[3])
    local d = tonumber(e[2]) or 0
    if x > 0 and d > 0 and now + d * x >= soft then
      return {'HIT', v, f, take(), now, soft, b, g, us, 0}
    end
    return {'HIT', v, f, 0, now, soft, b, g, us, 0}
  end
  -- Past the soft expiry: stale, while the hard TTL lasts. Redis expires a
  -- key only once its clock has passed the expiry, so an entry without a
  -- stale window (hard = soft) outlives its soft expiry by up to a
  -- millisecond: it is not served as stale then.
  local pttl = redis.call('PTTL', KEYS[1])
  if pttl > 1 then
    return {'STALE', v, f, take(), now, soft, b, g, us, now + pttl}
  end
end

-- A backoff marker (release.lua) only holds refreshes of an entry off; with
-- the entry gone, it must not make callers wait.
local took = take()
if took == 0 and redis.call('GET', KEYS[2]) == 'backoff' then
  took = take(true)
end
if took == 1 then
  return {'LOAD', now, us}
elseif took < 0 then
  return {'REFUSED', now, took}
end
local pttl = leasePTTL(KEYS[2])
if pttl < 0 then
  -- A lease without an expiry was not written by corral; wait a LeaseTTL.
  pttl = tonumber(ARGV[2])
end
local heard = 0
if ARGV[10] and ARGV[10] ~= '' then
  local publish = ({s = 'SPUBLISH', p = 'PUBLISH'})[string.sub(ARGV[1], 1, 1)]
  if publish then
    local n = redis.pcall(publish, ARGV[10], '')
    if type(n) == 'number' then
      heard = n
    end
  end
end
return {'WAIT', pttl, now, redis.call('GET', KEYS[2]), heard}
