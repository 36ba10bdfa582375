-- state: write the Redis copy of one state key of the holder (app/state/service.py).
-- ARGV[1] = op: put, delete (a tombstone) or fill (a read's copy from PostgreSQL: not a
-- change, no event); ARGV[2] = the state key; ARGV[3] = its version; ARGV[4] = the payload
-- (JSON; '' for a tombstone); ARGV[5] = how long the copy may stay unused (ms).
-- Versions come from one PostgreSQL sequence: a copy is replaced only by a newer version, so
-- a fill read before a change, or a write overtaken by a later one, changes nothing. A put or
-- delete appends a `state` event to the holder's change stream, with the working set's seq
-- (not bumped: a state change is no working-set change).
local op, field, version = ARGV[1], ARGV[2], tonumber(ARGV[3])
local held = redis.call('HGET', K_STATE, field)
if held and tonumber(string.match(held, '^(%d+):')) >= version then
  return { 'OK', 0 }
end
redis.call('HSET', K_STATE, field, ARGV[3] .. ':' .. ARGV[4])
redis.call('PEXPIRE', K_STATE, ARGV[5])
if op ~= 'fill' then
  local seq = redis.call('HGET', K_META, 'seq') or '0'
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_KEPT, '*', 'kind', 'state', 'seq', seq,
    'key', field, 'version', ARGV[3], 'op', op)
end
return { 'OK', 1 }
