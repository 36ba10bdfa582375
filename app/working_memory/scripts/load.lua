-- load: atomic rebuild (from Postgres) — wipe, start a new generation, place ARGV items.
--
-- seq restarts from the server clock in microseconds, never below the previous seq + 1, and
-- the generation is that seq. After Redis lost its data the old seq is gone; seeding from the
-- clock keeps (gen, seq) new, so the service can tell this generation from any earlier one.
-- (Calling TIME before writing is fine: scripts replicate their effects, Redis >= 5.)
local now = redis.call('TIME')
local seq = tonumber(now[1]) * 1000000 + tonumber(now[2])
local old_seq = redis.call('HGET', K_META, 'seq')
if old_seq then
  seq = math.max(seq, tonumber(old_seq) + 1)
end
seq = int_text(seq)
redis.call('DEL', unpack(STATE_KEYS)) -- the change stream stays: it says what happened
-- The state copy goes too: a rebuild is how a holder marked stale (a state write Redis missed,
-- app/state/service.py) becomes trusted again; every state key is read again from PostgreSQL.
redis.call('DEL', K_STATE)
redis.call('HSET', K_META, 'tokens', '0', 'seq', seq, 'gen', seq)
local total, admitted, rejected, evicted, evicted_ids, other_ids, times = place_items(0)
-- A rebuild replaces the whole set: a client mirroring it starts again from these entries.
emit(tonumber(seq), 'cleared', 'reason', 'rebuilt')
emit_placed(tonumber(seq), admitted, evicted)
return { 'OK', tonumber(seq), tonumber(seq), total, admitted, rejected, evicted, evicted_ids,
         other_ids, times }
