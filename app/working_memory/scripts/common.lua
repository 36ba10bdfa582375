-- Shared prelude, prepended by store.py to every other script (Redis has no script includes).
--
-- KEYS (all four carry the same {ns/robot} hash tag, so they live in one cluster slot and a
-- script may touch them together):
--   KEYS[1] items   HASH  memory_key -> item JSON
--   KEYS[2] evict   ZSET  score = importance, member = %020d(added_at_us) .. ":" .. memory_key
--   KEYS[3] access  ZSET  score = last access epoch ms, member = memory_key
--   KEYS[4] meta    HASH  tokens, budget (of the last place/load), seq, gen
--
-- Every script runs atomically, so the token total and both sorted sets change together and
-- no other client ever observes (or races with) a half-applied change. Redis does not roll
-- back the writes of a script that fails halfway, so store.py validates every argument
-- before calling: nothing below can fail on well-formed input.
local K_ITEMS, K_EVICT, K_ACCESS, K_META = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

-- meta disappears when Redis loses its data; the caller must rebuild with load.lua.
local function initialized()
  return redis.call('EXISTS', K_META) == 1
end

-- cjson prints numbers with 14 significant digits, which would corrupt microsecond
-- timestamps (16 digits). Item JSON is therefore written by hand: integers with %d (exact
-- below 2^53, checked in Python) and importance with %.17g (round-trips any double).
-- context.lua reads fields by position in this text (content first, member last): keep the
-- order. id is the memory's id in Postgres: a key can name another memory after a hard delete,
-- so removals name the id they mean and the membership mirror records ids, not keys.
local function encode_item(it)
  return string.format(
    '{"content":%s,"tokens":%d,"importance":%s,"added_at":%d,"last_access":%d,'
      .. '"from_recall":%s,"id":%d,"member":%s}',
    cjson.encode(it.content), it.tokens, string.format('%.17g', it.importance),
    it.added_at, it.last_access, it.from_recall and 'true' or 'false', it.id or 0,
    cjson.encode(it.member))
end

local function get_item(key)
  local raw = redis.call('HGET', K_ITEMS, key)
  if not raw then
    return nil
  end
  return cjson.decode(raw)
end

-- Drops one item from all three structures; returns its token count (caller adjusts total).
local function drop(key, it)
  redis.call('HDEL', K_ITEMS, key)
  redis.call('ZREM', K_EVICT, it.member)
  redis.call('ZREM', K_ACCESS, key)
  return it.tokens
end

-- Every script that changes the working set bumps seq by exactly one and replies with
-- (gen, seq). The service records both in Postgres under the robot's row lock, so the next
-- change must reply (gen, recorded seq + 1); anything else means Redis lost data or a
-- change went unrecorded, and the service rebuilds (app/working_memory/protocol.py).
local function bump_seq()
  return redis.call('HINCRBY', K_META, 'seq', 1)
end

local function gen()
  return tonumber(redis.call('HGET', K_META, 'gen'))
end

-- Places ARGV items into the working memory, evicting lowest importance, then oldest, until
-- each fits. ARGV[1] = budget, ARGV[2] = item count, then 8 fields per item:
-- key, content, tokens, importance, added_at_us, last_access_ms, from_recall ("1"/"0"), id.
-- Returns the new total; the admitted, rejected and evicted keys (each key in at most one
-- list, by where it ended up when the call finished); the ids of the evicted items; the ids
-- of items that left otherwise (a rejected item that was present, or another memory under a
-- re-used key); and, per admitted key in order, its added_at and last access as stored.
local ITEM_FIELDS = 8
local function place_items(total)
  local budget = tonumber(ARGV[1])
  local n = tonumber(ARGV[2])
  local final, lists, listed = {}, { admitted = {}, rejected = {}, evicted = {} }, {}
  local stored = {} -- key -> item, for the admitted
  local evicted_ids, other_ids = {}, {}
  local function note(key, outcome)
    final[key] = outcome
    local seen = listed[outcome] or {}
    listed[outcome] = seen
    if not seen[key] then
      seen[key] = true
      table.insert(lists[outcome], key)
    end
  end

  -- Evicts until `need` more tokens fit. The first call (need = 0) also enforces a budget
  -- that shrank since the last call, so the total never exceeds the budget after a script.
  local function make_room(need)
    while total + need > budget do
      local victim = redis.call('ZRANGE', K_EVICT, 0, 0)[1]
      if not victim then
        error('working memory inconsistent: token total ' .. total .. ' but no items')
      end
      local vkey = string.sub(victim, 22) -- strip "%020d:"
      local it = get_item(vkey)
      total = total - drop(vkey, it)
      table.insert(evicted_ids, it.id or 0)
      note(vkey, 'evicted')
    end
  end

  make_room(0)
  for i = 0, n - 1 do
    local b = 3 + i * ITEM_FIELDS
    local key = ARGV[b]
    local it = {
      content = ARGV[b + 1],
      tokens = tonumber(ARGV[b + 2]),
      importance = tonumber(ARGV[b + 3]),
      added_at = tonumber(ARGV[b + 4]),
      last_access = tonumber(ARGV[b + 5]),
      from_recall = ARGV[b + 6] == '1',
      id = tonumber(ARGV[b + 7]),
    }
    local old = get_item(key)
    if old then
      if old.id == nil or old.id == it.id then
        -- Re-placing keeps the original added_at: an update or a repeated recall does not
        -- make a memory "younger" and so does not buy it a later eviction slot. Last access
        -- never moves backwards (a late, older timestamp from a slow request is ignored).
        it.added_at = old.added_at
        it.last_access = math.max(it.last_access, old.last_access)
      else
        table.insert(other_ids, old.id) -- another memory under this key: it leaves
      end
      total = total - drop(key, old)
    end
    if it.tokens > budget then
      if old and old.id == it.id then
        table.insert(other_ids, it.id)
      end
      note(key, 'rejected')
    else
      make_room(it.tokens)
      it.member = string.format('%020d', it.added_at) .. ':' .. key
      redis.call('HSET', K_ITEMS, key, encode_item(it))
      redis.call('ZADD', K_EVICT, string.format('%.17g', it.importance), it.member)
      redis.call('ZADD', K_ACCESS, string.format('%d', it.last_access), key)
      total = total + it.tokens
      stored[key] = it
      note(key, 'admitted')
    end
  end

  redis.call('HSET', K_META, 'tokens', string.format('%d', total), 'budget', ARGV[1])
  local out = {}
  for _, outcome in ipairs({ 'admitted', 'rejected', 'evicted' }) do
    local keys = {}
    for _, key in ipairs(lists[outcome]) do
      if final[key] == outcome then
        table.insert(keys, key)
      end
    end
    table.insert(out, keys)
  end
  local times = {}
  for _, key in ipairs(out[1]) do
    table.insert(times, string.format('%d', stored[key].added_at))
    table.insert(times, string.format('%d', stored[key].last_access))
  end
  return total, out[1], out[2], out[3], evicted_ids, other_ids, times
end
