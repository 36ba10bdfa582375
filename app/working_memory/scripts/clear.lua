-- clear: drop every item but keep meta (still initialized, tokens 0); reply with the count.
if not initialized() then
  return { 'NOINIT' }
end
local n = redis.call('HLEN', K_MEMORY_ID)
redis.call('DEL', K_EVICT, K_ACCESS, unpack(ITEM_HASHES))
redis.call('HSET', K_META, 'tokens', '0')
local seq = bump_seq()
emit(seq, 'cleared', 'reason', 'cleared')
return { 'OK', gen(), seq, n }
