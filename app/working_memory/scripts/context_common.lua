-- Context prelude, between common.lua and each context_<strategy>.lua: what the three
-- strategies share. A context script returns the items a context takes, ordered and cut
-- exactly as app/working_memory/context.py assemble() does, so that only those items leave
-- Redis rather than the whole working set.
-- ARGV[1] = max_tokens, ARGV[2] = now in epoch ms (balanced ages items by the service's
-- clock, not by Redis's).
--
-- Reply: OK, token sum, the taken keys and their contents (in order), then three JSON arrays
-- over the same items: tokens, importances and scores (each the stored text or %.17g: exact
-- doubles). One string per numeric field rather than a reply value per item: Python parses
-- each in one call.
--
-- Order: score descending; ties go to the newer added_at, then to the smaller key. Taking
-- stops at the first item that does not fit, so a context is a prefix of that order. The
-- strategies read a sorted set from its top in growing slices, since where the cut falls is
-- unknown, and stop soon after it; numbers are sorted by Lua's own sort, never with a Lua
-- comparator function, which would be called for every comparison.
if load_pending() then
  return { 'PENDING' }
end
if not initialized() then
  return { 'NOINIT' }
end
local max_tokens, now_ms = tonumber(ARGV[1]), tonumber(ARGV[2])
local FIRST, MOST = 32, 256 -- members per read of a sorted set
local EXACT = 2 ^ 52 -- packed sort keys stay below this, so % on them is exact

local total, done = 0, false
local taken, taken_tokens, taken_importance, taken_score = {}, {}, {}, {}

-- Takes an item if it fits; false (and done) once one does not: taking stops there. tokens,
-- importance, score: as text (no score: the importance is the score).
local function take(key, tokens, importance, score)
  if not tokens then
    error('working memory inconsistent: ' .. key .. ' is ordered but has no item')
  end
  local t = tonumber(tokens)
  if total + t > max_tokens then
    done = true
    return false
  end
  total = total + t
  local n = #taken + 1
  taken[n], taken_tokens[n], taken_importance[n], taken_score[n] =
    key, tokens, importance, score or importance
  return true
end

-- The reply, once taking is over: only the taken items' contents are read.
local function reply()
  return { 'OK', total, taken, hmget(K_CONTENT, taken), json_array(taken_tokens),
    json_array(taken_importance), json_array(taken_score) }
end

-- Python compares str by code point, which for UTF-8 is byte order. Lua's "<" on strings
-- follows the server's locale (strcoll), so compare bytes.
local function key_less(a, b)
  for j = 1, math.min(#a, #b) do
    local x, y = string.byte(a, j), string.byte(b, j)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- Positions 1..n in descending order of values[j], with tie(positions) ordering positions
-- of equal values.
local function order_desc(values, n, tie)
  local first, dups, distinct = {}, {}, {}
  for j = 1, n do
    local v = values[j] + 0
    local f = first[v]
    if f == nil then
      first[v] = j
      distinct[#distinct + 1] = v
    elseif dups[v] then
      table.insert(dups[v], j)
    else
      dups[v] = { f, j }
    end
  end
  table.sort(distinct)
  local order = {}
  for d = #distinct, 1, -1 do
    local v = distinct[d]
    if dups[v] then
      for _, j in ipairs(tie(dups[v])) do
        order[#order + 1] = j
      end
    else
      order[#order + 1] = first[v]
    end
  end
  return order
end

-- The given positions of items with equal scores in context order: newer added_at first,
-- then the smaller key. When the positions are in descending key order already (a tie run
-- read from a sorted set), added_at and place pack into one number for a plain sort.
local function by_added_then_key(positions, keys, added, keys_descending)
  local n, lo, hi = #positions, math.huge, -math.huge
  for _, j in ipairs(positions) do
    local a = added[j]
    if a < lo then
      lo = a
    end
    if a > hi then
      hi = a
    end
  end
  local ordered = {}
  if keys_descending and (hi - lo + 1) * n < EXACT then
    local packed = {}
    for i, j in ipairs(positions) do
      packed[i] = (added[j] - lo) * n + (i - 1)
    end
    table.sort(packed)
    for i = n, 1, -1 do
      ordered[#ordered + 1] = positions[packed[i] % n + 1]
    end
    return ordered
  end
  local a = {}
  for i, j in ipairs(positions) do
    a[i] = added[j]
  end
  for _, i in ipairs(order_desc(a, #a, function(same)
    table.sort(same, function(x, y)
      return key_less(keys[positions[x]], keys[positions[y]])
    end)
    return same
  end)) do
    ordered[#ordered + 1] = positions[i]
  end
  return ordered
end
