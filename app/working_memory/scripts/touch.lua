-- touch: record an access (ARGV[1] = key, ARGV[2] = epoch ms); reply found (1 or 0) and the
-- memory id under the key. Not a change of the working set: seq stays, and the
-- service mirrors it without the robot's lock (last access only ever moves forward).
if not initialized() then
  return { 'NOINIT' }
end
local key = ARGV[1]
local it = get_item(key)
if not it then
  return { 'OK', 0, 0 }
end
it.last_access = math.max(it.last_access, tonumber(ARGV[2]))
redis.call('HSET', K_ITEMS, key, encode_item(it))
redis.call('ZADD', K_ACCESS, string.format('%d', it.last_access), key)
return { 'OK', 1, it.id or 0 }
