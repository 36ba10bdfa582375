-- usage: token total, item count, gen and seq (NOINIT when not initialized).
if not initialized() then
  return { 'NOINIT' }
end
local meta = redis.call('HMGET', K_META, 'tokens', 'gen', 'seq')
return { 'OK', tonumber(meta[1]), redis.call('HLEN', K_MEMORY_ID), tonumber(meta[2]),
         tonumber(meta[3]) }
