-- snapshot: every item in eviction order with all its fields, and the token total, read in
-- one atomic step. Reply: OK, tokens, keys, then per field one array in the keys' order:
-- content, tokens, importance, added_at, last access, from_recall, memory id; then the id of
-- the change stream's last entry (a client following the stream resumes after it).
if load_pending() then
  return { 'PENDING' }
end
if not initialized() then
  return { 'NOINIT' }
end
local keys = held_keys()
return { 'OK', redis.call('HGET', K_META, 'tokens'), keys, hmget(K_CONTENT, keys),
  hmget(K_TOKENS, keys), hmget(K_IMPORTANCE, keys), hmget(K_ADDED_AT, keys),
  sliced('ZMSCORE', K_ACCESS, keys), hmget(K_FROM_RECALL, keys), hmget(K_MEMORY_ID, keys),
  last_event_id() }
