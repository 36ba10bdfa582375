-- context, balanced: importance × 1/(1 + hours since added), highest first; an item added
-- "in the future" counts as new. The same IEEE double operations as balanced_scores() in
-- Python, on exact inputs (integers below 2^53), so the same values: %.17g writes them
-- exactly.
--
-- A score never exceeds its importance, and the evict set is sorted by importance. So: read
-- from its top until the items read hold more than max_tokens. All of them score at least
-- `lowest`, so every item that does not is past the cut, and only items with importance >=
-- lowest can score that much: the rest of the set is never read.
local US_PER_HOUR = 3600000000
local now_us = now_ms * 1000
local keys, importance, added, score, tokens, n = {}, {}, {}, {}, {}, 0
local lowest = -math.huge

-- Adds an item (its evict member and importance text) if it can score `lowest` or more.
local function add(member, imp)
  local at = added_at_of_member(member)
  local age = now_us - at
  if age < 0 then
    age = 0
  end
  local v = tonumber(imp) / (1.0 + age / US_PER_HOUR)
  if v >= lowest then
    n = n + 1
    keys[n], importance[n], added[n], score[n] = key_of_member(member), imp, at, v
  end
end

local held, rank, size = 0, 0, FIRST
while true do
  local slice = redis.call('ZREVRANGE', K_EVICT, rank, rank + size - 1, 'WITHSCORES')
  local from = n + 1
  for j = 1, #slice, 2 do
    add(slice[j], slice[j + 1]) -- always added: lowest is -inf so far
  end
  for j, t in ipairs(hmget(K_TOKENS, { unpack(keys, from, n) })) do
    tokens[from + j - 1] = t
    held = held + tonumber(t)
  end
  if #slice / 2 < size then
    break -- read it all
  end
  if held > max_tokens then
    lowest = math.huge
    for i = 1, n do
      if score[i] < lowest then
        lowest = score[i]
      end
    end
    -- Past the items read, in the same order: those with importance >= lowest.
    local rest = redis.call('ZREVRANGEBYSCORE', K_EVICT, '+inf', string.format('%.17g', lowest),
      'WITHSCORES', 'LIMIT', n, -1)
    for j = 1, #rest, 2 do
      add(rest[j], rest[j + 1])
    end
    break
  end
  rank, size = rank + size, math.min(2 * size, MOST)
end

-- Candidates are in evict-set order: importance, added_at, then key, all descending. Ties
-- of one importance therefore sit in descending key order already (by_added_then_key's
-- packed sort); only equal scores from different importances (rounding) compare keys.
local order = order_desc(score, n, function(same)
  local v = importance[same[1]] + 0
  for _, j in ipairs(same) do
    if importance[j] + 0 ~= v then
      return by_added_then_key(same, keys, added, false)
    end
  end
  return by_added_then_key(same, keys, added, true)
end)

size = FIRST
for i, p in ipairs(order) do
  if not tokens[p] then -- past the items read first: read this and the next ones now
    local want, at = {}, {}
    for k = i, math.min(i + size - 1, #order) do
      if not tokens[order[k]] then
        want[#want + 1], at[#at + 1] = keys[order[k]], order[k]
      end
    end
    for m, t in ipairs(hmget(K_TOKENS, want)) do
      tokens[at[m]] = t
    end
    size = math.min(2 * size, MOST)
  end
  if not take(keys[p], tokens[p], importance[p], string.format('%.17g', score[p])) then
    break
  end
end
return reply()
