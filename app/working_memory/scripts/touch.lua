-- touch: record an access (ARGV[1] = key, ARGV[2] = epoch ms); reply found = 1 or 0.
if not initialized() then
  return { 'NOINIT' }
end
local key = ARGV[1]
local it = get_item(key)
local found = 0
if it then
  -- Last access never moves backwards, as in place_items.
  it.last_access = math.max(it.last_access, tonumber(ARGV[2]))
  redis.call('HSET', K_ITEMS, key, encode_item(it))
  redis.call('ZADD', K_ACCESS, string.format('%d', it.last_access), key)
  found = 1
end
return { 'OK', bump_seq(), found }
