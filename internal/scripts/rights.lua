-- rights.lua: try each command corral's scripts run, on a probe key under
-- Prefix, and report the errors of those Redis refuses to this ACL user
-- (trials.lua, put before this file; see internal/diagnose/rights.go).
--
-- KEYS[1] probe key, Prefix:probe
--
-- Reply: the error messages, one per command refused, each ending with the
-- command's name in brackets (empty: all allowed).
return refusals(KEYS[1])
