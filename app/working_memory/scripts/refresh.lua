-- refresh: a recall's hits that are already in place. ARGV as place's (ARGV[1], the budget, is
-- not read). If every item is held exactly as given (the same memory under its key, with the
-- same content, tokens, importance and from_recall), each one's last access moves forward to
-- its last_access_ms and the reply lists no keys; otherwise nothing changes and the reply
-- lists the keys that are not held so (then the caller places them all). Like touch, not a
-- change of the working set: seq stays, nothing is emitted, and the service mirrors the
-- accesses without the robot's lock (last access only ever moves forward).
if not initialized() then
  return { 'NOINIT' }
end
local n = tonumber(ARGV[2])
local missing = {}
for i = 0, n - 1 do
  local b = 3 + i * ITEM_FIELDS
  local key = ARGV[b]
  local id = redis.call('HGET', K_MEMORY_ID, key)
  -- Cheapest comparisons first; content last (the longest).
  local held = id and tonumber(id) == tonumber(ARGV[b + 7])
    and redis.call('HGET', K_FROM_RECALL, key) == ARGV[b + 6]
    and tonumber(redis.call('HGET', K_TOKENS, key)) == tonumber(ARGV[b + 2])
    and tonumber(redis.call('HGET', K_IMPORTANCE, key)) == tonumber(ARGV[b + 3])
    and redis.call('HGET', K_CONTENT, key) == ARGV[b + 1]
  if not held then
    table.insert(missing, key)
  end
end
if #missing == 0 then
  for i = 0, n - 1 do
    local b = 3 + i * ITEM_FIELDS
    local key = ARGV[b]
    local last_access = math.max(tonumber(redis.call('ZSCORE', K_ACCESS, key)),
      tonumber(ARGV[b + 5]))
    redis.call('ZADD', K_ACCESS, int_text(last_access), key)
  end
end
return { 'OK', missing }
