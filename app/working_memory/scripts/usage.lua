-- usage: token total and item count (NOINIT when not initialized).
if not initialized() then
  return { 'NOINIT' }
end
return { 'OK', tonumber(redis.call('HGET', K_META, 'tokens')), redis.call('HLEN', K_ITEMS) }
