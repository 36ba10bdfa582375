-- load: atomic rebuild (from Postgres) — wipe, start a new generation, place ARGV items.
--
-- The argument after the items is the mode. "if_missing" acts only when meta is absent: two
-- requests that both saw NOINIT both rebuild, and the second must not wipe what the first
-- (and any place that followed it) already wrote.
local mode = ARGV[3 + 7 * tonumber(ARGV[2])]
if mode == 'if_missing' and initialized() then
  return { 'OK', tonumber(redis.call('HGET', K_META, 'seq')),
           tonumber(redis.call('HGET', K_META, 'tokens')), {}, {}, {} }
end
--
-- seq restarts from the server clock in microseconds, never below the previous seq + 1. After
-- Redis lost its data the old seq is gone; seeding from the clock keeps seqs increasing
-- across generations, so last-writer-wins-by-seq in Postgres still prefers the newest write.
-- (Calling TIME before writing is fine: scripts replicate their effects, Redis >= 5.)
local now = redis.call('TIME')
local seq = tonumber(now[1]) * 1000000 + tonumber(now[2])
local old_seq = redis.call('HGET', K_META, 'seq')
if old_seq then
  seq = math.max(seq, tonumber(old_seq) + 1)
end
seq = string.format('%d', seq)
redis.call('DEL', K_ITEMS, K_EVICT, K_ACCESS, K_META)
redis.call('HSET', K_META, 'tokens', '0', 'seq', seq, 'gen', seq)
local total, admitted, rejected, evicted = place_items(0)
return { 'OK', tonumber(seq), total, admitted, rejected, evicted }
