-- Shared prelude, prepended by store.py to every other script (Redis has no script includes).
--
-- KEYS, in the order of store.robot_keys; all carry the robot's {ns/robot} hash tag, so they
-- live in one cluster slot and a script may touch them together. One hash per item field,
-- each memory_key -> value as text, and two sorted sets that order the items:
--   content      HASH  the memory's text, raw
--   tokens       HASH  token count
--   importance   HASH  importance (%.17g: exact)
--   added_at     HASH  epoch µs, kept when the item is placed again: its age
--   memory_id    HASH  the memory's id in Postgres
--   from_recall  HASH  "1" when a recall placed it, else "0"
--   evict        ZSET  the eviction order (evict_member below)
--   access       ZSET  score = last access epoch ms, member = memory_key
--   meta         HASH  tokens (the total), budget (of the last place/load), seq, gen
--   events       STREAM the change stream (emit_* below): what GET …/working-memory/events
--                serves, each entry written by the script that made the change
--
-- Every script runs atomically, so the fields, the token total and both sorted sets change
-- together and no other client ever observes (or races with) a half-applied change. Redis
-- does not roll back the writes of a script that fails halfway, so store.py validates every
-- argument before calling: nothing below can fail on well-formed input.
local K_CONTENT, K_TOKENS, K_IMPORTANCE, K_ADDED_AT, K_MEMORY_ID, K_FROM_RECALL =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local K_EVICT, K_ACCESS, K_META, K_EVENTS = KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local K_PENDING, K_STATE = KEYS[11], KEYS[12]
-- The keys holding the working set (not the change stream): what a rebuild wipes.
local STATE_KEYS = { KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8],
  KEYS[9] }
local ITEM_HASHES = { K_CONTENT, K_TOKENS, K_IMPORTANCE, K_ADDED_AT, K_MEMORY_ID, K_FROM_RECALL }

-- The eviction order, [importance ASC, added_at ASC], defined here and nowhere else in Lua:
-- the evict set's score is the importance and its member "%020d(added_at):memory_key". Equal
-- scores sort by member bytes, so the oldest comes first (then the smaller key), and
-- ZRANGE 0 0 is the next victim. items.eviction_order is the same order in Python.
local function evict_member(added_at, key)
  return string.format('%020d', added_at) .. ':' .. key
end

local function key_of_member(member)
  return string.sub(member, 22)
end

local function added_at_of_member(member)
  return tonumber(string.sub(member, 1, 20))
end

local function next_victim()
  local member = redis.call('ZRANGE', K_EVICT, 0, 0)[1]
  return member and key_of_member(member)
end

-- Redis's clock in epoch ms (the pending loads' deadlines are in it, never a client's).
local function redis_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A recall's load of this robot is pending (answered before it was applied) and its deadline
-- has not passed: the read scripts reply PENDING, and the reader waits (store.py), so that a
-- read issued after the recall's response sees its hits, in any process.
local function load_pending()
  return redis.call('ZCOUNT', K_PENDING, redis_ms(), '+inf') > 0
end

-- meta disappears when Redis loses its data; the caller must rebuild with load.lua.
local function initialized()
  return redis.call('EXISTS', K_META) == 1
end

-- Numbers are written with %d (integers: exact below 2^53, checked in Python) and %.17g
-- (importance: round-trips any double); tostring would keep only 14 significant digits.
local function int_text(n)
  return string.format('%d', n)
end

-- One value per key of `keys` (false where there is none), by `command` on `key` over the
-- keys in slices: unpack has a stack limit. HMGET reads a hash's fields, ZMSCORE a sorted
-- set's scores.
local SLICE = 256
local function sliced(command, key, keys)
  local values = {}
  for a = 1, #keys, SLICE do
    local got = redis.call(command, key, unpack(keys, a, math.min(a + SLICE - 1, #keys)))
    for j = 1, #got do
      values[a + j - 1] = got[j]
    end
  end
  return values
end

local function hmget(hash, keys)
  return sliced('HMGET', hash, keys)
end

-- Every held key in eviction order (next victim first).
local function held_keys()
  local keys = {}
  for i, member in ipairs(redis.call('ZRANGE', K_EVICT, 0, -1)) do
    keys[i] = key_of_member(member)
  end
  return keys
end

-- Values (numbers, or their stored text) as one JSON array: Python parses it in one call.
local function json_array(values)
  return '[' .. table.concat(values, ',') .. ']'
end

-- The fields place, remove and touch decide by; nil when the key holds no item. id is the
-- memory's id in Postgres: a key can name another memory after a hard delete, so removals
-- name the id they mean and the membership mirror records ids, not keys.
local function get_item(key)
  local id = redis.call('HGET', K_MEMORY_ID, key)
  if not id then
    return nil
  end
  return {
    id = tonumber(id),
    tokens = tonumber(redis.call('HGET', K_TOKENS, key)),
    added_at = tonumber(redis.call('HGET', K_ADDED_AT, key)),
    last_access = tonumber(redis.call('ZSCORE', K_ACCESS, key)),
  }
end

local function write_item(key, it)
  local importance = string.format('%.17g', it.importance)
  redis.call('HSET', K_CONTENT, key, it.content)
  redis.call('HSET', K_TOKENS, key, int_text(it.tokens))
  redis.call('HSET', K_IMPORTANCE, key, importance)
  redis.call('HSET', K_ADDED_AT, key, int_text(it.added_at))
  redis.call('HSET', K_MEMORY_ID, key, int_text(it.id))
  redis.call('HSET', K_FROM_RECALL, key, it.from_recall and '1' or '0')
  redis.call('ZADD', K_EVICT, importance, evict_member(it.added_at, key))
  redis.call('ZADD', K_ACCESS, int_text(it.last_access), key)
end

-- Drops one item (it: from get_item) from every structure; returns its token count (the
-- caller adjusts the total).
local function drop(key, it)
  for _, hash in ipairs(ITEM_HASHES) do
    redis.call('HDEL', hash, key)
  end
  redis.call('ZREM', K_EVICT, evict_member(it.added_at, key))
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

-- The change stream: one entry per change of one key (added, evicted, removed) or of all
-- (cleared), carrying the change's seq; entry ids are the stream's own (ms-n), increasing,
-- which clients resume from (Last-Event-ID). About the last EVENTS_KEPT entries are kept
-- (docs/SCALING.md: an `added` entry carries the content).
-- A place's entries are its final outcome, removals first: a client applying them in order
-- holds the same set as Redis after the script.
local EVENTS_KEPT = 1000
local function emit(seq, kind, ...)
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_KEPT, '*', 'kind', kind,
    'seq', string.format('%d', seq), ...)
end

-- Keys place_items rejected (larger than the budget) while they were held: they left.
local rejected_held = {}

local function emit_placed(seq, admitted, evicted)
  for _, key in ipairs(evicted) do
    emit(seq, 'evicted', 'key', key)
  end
  for _, key in ipairs(rejected_held) do
    emit(seq, 'removed', 'key', key)
  end
  for _, key in ipairs(admitted) do
    emit(seq, 'added', 'key', key, 'memory_id', redis.call('HGET', K_MEMORY_ID, key),
      'tokens', redis.call('HGET', K_TOKENS, key),
      'importance', redis.call('HGET', K_IMPORTANCE, key),
      'content', redis.call('HGET', K_CONTENT, key))
  end
end

-- The id of the stream's last entry ("0-0": none yet).
local function last_event_id()
  local last = redis.call('XREVRANGE', K_EVENTS, '+', '-', 'COUNT', 1)[1]
  return last and last[1] or '0-0'
end

-- Places ARGV items into the working memory, evicting in the eviction order until each
-- fits. ARGV[1] = budget, ARGV[2] = item count, then 8 fields per item:
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
      local vkey = next_victim()
      if not vkey then
        error('working memory inconsistent: token total ' .. total .. ' but no items')
      end
      local it = get_item(vkey)
      total = total - drop(vkey, it)
      table.insert(evicted_ids, it.id)
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
      -- + 0 turns -0 into 0: every reader (snapshot, context, Python) then sees one zero.
      importance = tonumber(ARGV[b + 3]) + 0,
      added_at = tonumber(ARGV[b + 4]),
      last_access = tonumber(ARGV[b + 5]),
      from_recall = ARGV[b + 6] == '1',
      id = tonumber(ARGV[b + 7]),
    }
    local old = get_item(key)
    if old then
      if old.id == it.id then
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
      if old then
        table.insert(rejected_held, key)
      end
      note(key, 'rejected')
    else
      make_room(it.tokens)
      write_item(key, it)
      total = total + it.tokens
      stored[key] = it
      note(key, 'admitted')
    end
  end

  redis.call('HSET', K_META, 'tokens', int_text(total), 'budget', ARGV[1])
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
    table.insert(times, int_text(stored[key].added_at))
    table.insert(times, int_text(stored[key].last_access))
  end
  return total, out[1], out[2], out[3], evicted_ids, other_ids, times
end
