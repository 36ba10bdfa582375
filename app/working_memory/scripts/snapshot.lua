-- snapshot: every item in eviction order plus meta, read in one atomic step.
if not initialized() then
  return { 'NOINIT' }
end
local keys, docs = {}, {}
for i, member in ipairs(redis.call('ZRANGE', K_EVICT, 0, -1)) do
  keys[i] = string.sub(member, 22)
  docs[i] = redis.call('HGET', K_ITEMS, keys[i])
end
local meta = redis.call('HMGET', K_META, 'tokens', 'seq', 'gen')
return { 'OK', meta[1], meta[2], meta[3], keys, docs }
