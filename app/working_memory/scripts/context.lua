-- context: the items a context takes, ordered and cut exactly as app/working_memory/context.py
-- assemble() does, so that only those items leave Redis rather than the whole working set.
-- ARGV[1] = strategy (recent | important | balanced), ARGV[2] = max_tokens,
-- ARGV[3] = now in epoch ms (balanced ages items by the service's clock, not by Redis's).
--
-- Reply: OK, token sum, then five JSON arrays over the taken items, in order: contents,
-- keys (both as the JSON text cut out of the item JSON), tokens, importances and scores (as
-- stored, or %.17g: the same doubles). A few strings rather than a reply value per field:
-- Redis would convert each to RESP and Python make an object of each.
--
-- Order: score descending; ties go to the newer added_at, then to the smaller key. Taking
-- stops at the first item that does not fit. recent and important read a sorted set from its
-- top and stop soon after the cut; balanced reads only the items that can score high enough.
-- Each operation per item costs here, so item JSON is only searched (never decoded) and
-- numbers are sorted by Lua's own sort, never with a Lua comparator function.
if not initialized() then
  return { 'NOINIT' }
end
local find, sub, match = string.find, string.sub, string.match
local strategy, max_tokens = ARGV[1], tonumber(ARGV[2])
local now_us = tonumber(ARGV[3]) * 1000
local US_PER_HOUR = 3600000000
local FIRST, MOST = 32, 256 -- members per read: growing, as where the cut falls is unknown
local EXACT = 2 ^ 52 -- packed sort keys stay below this, so % on them is exact

local total, done, n_out = 0, false, 0
local contents, keys_json, toks_out, imps_out, scores_out = {}, {}, {}, {}, {}

-- HMGET in slices: unpack has a stack limit.
local function read_items(keys)
  local docs = {}
  for a = 1, #keys, MOST do
    local got = redis.call('HMGET', K_ITEMS, unpack(keys, a, math.min(a + MOST - 1, #keys)))
    for j = 1, #got do
      docs[a + j - 1] = got[j]
    end
  end
  return docs
end

local function check(doc, key)
  if not doc then
    error('working memory inconsistent: ' .. key .. ' is ordered but has no item')
  end
  return doc
end

-- Item JSON as encode_item writes it: {"content":<string>,"tokens":N,"importance":X,...}.
-- Inside cjson's encoding of the content every '"' is escaped, so the first ',"tokens":' is
-- that field, and the content's JSON text is everything before it. Only plain finds and
-- anchored matches: an unanchored pattern would be tried at every position of the content.
-- Returns where ',"tokens":' starts, the tokens (number and text) and the importance text.
local function fields(doc, key)
  local p = find(check(doc, key), ',"tokens":', 12, true)
  local tokens, importance = match(doc, '^(%d+),"importance":([^,]+)', p + 10)
  return p, tonumber(tokens), tokens, importance
end

-- added_at, from the end of the JSON: ...,"member":"%020d(added_at):key"}. cjson escapes
-- some characters ('/', quotes), so the key must be there as it is; if not, search.
local function added_of(doc, key)
  local n = #key
  if sub(check(doc, key), -n - 3, -3) == ':' .. key then
    return tonumber(sub(doc, -n - 23, -n - 4))
  end
  return tonumber(match(doc, '^%d+', find(doc, ',"added_at":', 12, true) + 12))
end

-- Takes an item if it fits; false (and done) once one does not: taking stops there, so the
-- context is always a prefix of the strategy's order. p, t, t_text, imp: see fields();
-- score: the score's text (none: the importance).
local function take_one(key, doc, p, t, t_text, imp, score)
  if total + t > max_tokens then
    done = true
    return false
  end
  total = total + t
  if imp == '-0' then
    imp = '0' -- -0.0 is stored as "-0", which JSON decoding (the snapshot's) reads as 0
  end
  n_out = n_out + 1
  contents[n_out] = sub(doc, 12, p - 1)
  -- The item JSON ends with ,"member":"%020d(added_at):<the key as JSON text>"}
  keys_json[n_out] = '"' .. sub(doc, find(doc, ',"member":"', p, true) + 32, -2)
  toks_out[n_out], imps_out[n_out], scores_out[n_out] = t_text, imp, score or imp
  return true
end

-- Takes keys in order until one does not fit. scores: their score texts; docs: their JSON,
-- when read already.
local function take(keys, scores, docs)
  if done or #keys == 0 then
    return
  end
  docs = docs or read_items(keys)
  for j = 1, #keys do
    local p, t, t_text, imp = fields(docs[j], keys[j])
    if not take_one(keys[j], docs[j], p, t, t_text, imp, scores[j]) then
      return
    end
  end
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
-- of equal values. Adding 0 turns -0 into 0, as Python's sort sees it.
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

if strategy == 'important' then
  -- The evict set from the top is importance desc, added_at desc, then key desc: only a run
  -- of equal importance and equal added_at needs turning round. The items' JSON is read for
  -- taking anyway, and their importance comes from it (as stored, the same text as the
  -- score): no WITHSCORES, which Redis would have to format.
  local rank, size = 0, FIRST
  repeat
    local members = redis.call('ZREVRANGE', K_EVICT, rank, rank + size - 1)
    local last, n = #members < size, #members
    local keys, cuts, toks, texts, imps, at, v = {}, {}, {}, {}, {}, {}, {}
    for j, member in ipairs(members) do
      keys[j] = sub(member, 22) -- "%020d(added_at):key"
    end
    local docs = read_items(keys)
    for j, member in ipairs(members) do
      cuts[j], toks[j], texts[j], imps[j] = fields(docs[j], keys[j])
      at[j], v[j] = sub(member, 1, 20), tonumber(imps[j])
    end
    -- A run at the end of the slice may go on past it: leave it to the next slice.
    local stop = n
    if not last then
      while stop > 1 and at[stop - 1] == at[n] and v[stop - 1] == v[n] do
        stop = stop - 1
      end
      stop = stop - 1
    end
    if stop == 0 and not last then
      size = 2 * size -- one run fills the slice: read more of it at once
    else
      local j = 1
      while j <= stop and not done do
        local e = j
        while e < stop and at[e + 1] == at[j] and v[e + 1] == v[j] do
          e = e + 1
        end
        for i = e, j, -1 do
          if not take_one(keys[i], docs[i], cuts[i], toks[i], texts[i], imps[i]) then
            break
          end
        end
        j = e + 1
      end
      rank, size = rank + stop, math.min(2 * size, MOST)
    end
  until done or last
elseif strategy == 'recent' then
  -- The access set from the top is last access desc, then key desc. A run of equal last
  -- access (a batch placed by one request) is ordered by added_at from its items' JSON.
  local rank, size = 0, FIRST
  repeat
    local slice = redis.call('ZREVRANGE', K_ACCESS, rank, rank + size - 1, 'WITHSCORES')
    local n = #slice / 2
    local last = n < size
    rank = rank + n
    local keys, scores, nk, j = {}, {}, 0, 1
    while j <= n and not done do
      local s, e = slice[2 * j], j -- same double, same reply text: last access is an integer
      while e < n and slice[2 * e + 2] == s do
        e = e + 1
      end
      local run = {}
      for i = j, e do
        run[#run + 1] = slice[2 * i - 1]
      end
      if e == n and not last then -- the run may go on past this slice
        for _, key in ipairs(redis.call('ZREVRANGEBYSCORE', K_ACCESS, s, s, 'LIMIT', #run, -1)) do
          run[#run + 1] = key
        end
        rank = rank + #run - (e - j + 1)
      end
      if #run == 1 then
        nk = nk + 1
        keys[nk], scores[nk] = run[1], s
      else
        take(keys, scores) -- what comes before the run
        keys, scores, nk = {}, {}, 0
        if not done then
          local docs, added, positions = read_items(run), {}, {}
          for i, key in ipairs(run) do
            added[i], positions[i] = added_of(docs[i], key), i
          end
          local k, d, a = {}, {}, {}
          for i, p in ipairs(by_added_then_key(positions, run, added, true)) do
            k[i], d[i], a[i] = run[p], docs[p], s
          end
          take(k, a, d)
        end
      end
      j = e + 1
    end
    take(keys, scores)
    size = math.min(2 * size, MOST)
  until done or last
else
  -- balanced: importance × 1/(1 + hours since added); an item added "in the future" is new.
  -- The same IEEE double operations as balanced_scores() in Python, on exact inputs
  -- (integers below 2^53), so the same values: %.17g writes them exactly.
  --
  -- A score never exceeds its importance, and the evict set is sorted by importance. So:
  -- read from its top until the items read hold more than max_tokens. All of them score at
  -- least `lowest`, so every item that does not is past the cut, and only items with
  -- importance >= lowest can score that much: the rest of the set is never read.
  local keys, imps, added, score, n = {}, {}, {}, {}, 0
  local docs, cuts, toks, texts, lowest = {}, {}, {}, {}, -math.huge
  -- Adds an item (member, importance text, key if cut out already) if it can score
  -- `lowest` or more.
  local function add(member, imp, key)
    local at = tonumber(sub(member, 1, 20))
    local age = now_us - at
    if age < 0 then
      age = 0
    end
    local v = (tonumber(imp) + 0) / (1.0 + age / US_PER_HOUR) -- + 0: -0 reads back as 0
    if v >= lowest then
      n = n + 1
      keys[n], imps[n], added[n], score[n] = key or sub(member, 22), imp, at, v
    end
  end
  -- The items read first come with their JSON, and their importance from it (as stored,
  -- the same text as the score): no WITHSCORES, which Redis would have to format.
  local held, rank, size = 0, 0, FIRST
  while true do
    local members = redis.call('ZREVRANGE', K_EVICT, rank, rank + size - 1)
    local from = n + 1
    for j, member in ipairs(members) do
      keys[from + j - 1] = sub(member, 22)
    end
    local got = read_items({ unpack(keys, from, from + #members - 1) })
    for j, member in ipairs(members) do
      local i = from + j - 1
      local p, t, t_text, imp = fields(got[j], keys[i])
      add(member, imp, keys[i]) -- always added (lowest is -inf so far), as item i
      docs[i], cuts[i], toks[i], texts[i] = got[j], p, t, t_text
      held = held + t
    end
    if #members < size then
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
      local rest = redis.call('ZREVRANGEBYSCORE', K_EVICT, '+inf',
        string.format('%.17g', lowest), 'WITHSCORES', 'LIMIT', n, -1)
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
    local v = imps[same[1]] + 0
    for _, j in ipairs(same) do
      if imps[j] + 0 ~= v then
        return by_added_then_key(same, keys, added, false)
      end
    end
    return by_added_then_key(same, keys, added, true)
  end)
  size = FIRST
  for i, p in ipairs(order) do
    if not docs[p] then -- past the items read first: read this and the next ones now
      local want, at = {}, {}
      for k = i, math.min(i + size - 1, #order) do
        if not docs[order[k]] then
          want[#want + 1], at[#at + 1] = keys[order[k]], order[k]
        end
      end
      for m, doc in ipairs(read_items(want)) do
        docs[at[m]] = doc
      end
      size = math.min(2 * size, MOST)
    end
    local doc, t_text, imp = docs[p], texts[p], imps[p]
    local q, t = cuts[p], toks[p]
    if not q then
      q, t, t_text = fields(doc, keys[p])
    end
    if not take_one(keys[p], doc, q, t, t_text, imp, string.format('%.17g', score[p])) then
      break
    end
  end
end

local function array(values)
  return '[' .. table.concat(values, ',') .. ']'
end
return { 'OK', total, array(contents), array(keys_json), array(toks_out), array(imps_out),
  array(scores_out) }
