-- touch: record an access (ARGV[1] = key, ARGV[2] = epoch ms); reply found (1 or 0) and the
-- memory id under the key. Not a change of the working set: seq stays, and the
-- service mirrors it without the robot's lock (last access only ever moves forward).
if not initialized() then
  return { 'NOINIT' }
end
local key = ARGV[1]
local id = redis.call('HGET', K_MEMORY_ID, key)
if not id then
  return { 'OK', 0, 0 }
end
local last_access = math.max(tonumber(redis.call('ZSCORE', K_ACCESS, key)), tonumber(ARGV[2]))
redis.call('ZADD', K_ACCESS, int_text(last_access), key)
return { 'OK', 1, tonumber(id) }
