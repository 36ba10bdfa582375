-- snapshot: every item in eviction order with all its fields, and the token total, read in
-- one atomic step. Reply: OK, tokens, keys, then per field one array in the keys' order:
-- content, tokens, importance, added_at, last access, from_recall, memory id; then the id of
-- the change stream's last entry (a client following the stream resumes after it).
if not initialized() then
  return { 'NOINIT' }
end
local keys = {}
for i, member in ipairs(redis.call('ZRANGE', K_EVICT, 0, -1)) do
  keys[i] = key_of_member(member)
end
local by_key, last_access = redis.call('ZRANGE', K_ACCESS, 0, -1, 'WITHSCORES'), {}
for i = 1, #by_key, 2 do
  last_access[by_key[i]] = by_key[i + 1]
end
local access = {}
for i, key in ipairs(keys) do
  access[i] = last_access[key] or false -- a hole would cut the reply short
end
return { 'OK', redis.call('HGET', K_META, 'tokens'), keys, hmget(K_CONTENT, keys),
  hmget(K_TOKENS, keys), hmget(K_IMPORTANCE, keys), hmget(K_ADDED_AT, keys), access,
  hmget(K_FROM_RECALL, keys), hmget(K_MEMORY_ID, keys), last_event_id() }
