-- remove: drop the ARGV keys that are present; reply with the removed ones.
if not initialized() then
  return { 'NOINIT' }
end
local total = tonumber(redis.call('HGET', K_META, 'tokens'))
local removed = {}
for _, key in ipairs(ARGV) do
  local it = get_item(key)
  if it then
    total = total - drop(key, it)
    table.insert(removed, key)
  end
end
redis.call('HSET', K_META, 'tokens', string.format('%d', total))
return { 'OK', bump_seq(), removed }
