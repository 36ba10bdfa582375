-- remove: ARGV is pairs (key, id); drops each key whose item is that memory (a key can name
-- another memory by now: after a hard delete and a new add of the same key, that one stays).
-- Replies with the removed keys and ids.
if not initialized() then
  return { 'NOINIT' }
end
local total = tonumber(redis.call('HGET', K_META, 'tokens'))
local keys, ids = {}, {}
for i = 1, #ARGV, 2 do
  local key, id = ARGV[i], tonumber(ARGV[i + 1])
  local it = get_item(key)
  if it and it.id == id then
    total = total - drop(key, it)
    table.insert(keys, key)
    table.insert(ids, id)
  end
end
redis.call('HSET', K_META, 'tokens', int_text(total))
local seq = bump_seq()
for _, key in ipairs(keys) do
  emit(seq, 'removed', 'key', key)
end
return { 'OK', gen(), seq, keys, ids }
