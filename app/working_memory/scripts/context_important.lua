-- context, important: importance, highest first.
--
-- The evict set read from its top is importance desc, added_at desc, then key desc (the
-- eviction order reversed): the context order already, except that within a run of equal
-- importance and equal added_at the smaller key goes first. Such runs are turned round.
local rank, size = 0, FIRST
repeat
  local slice = redis.call('ZREVRANGE', K_EVICT, rank, rank + size - 1, 'WITHSCORES')
  local n = #slice / 2
  local last = n < size
  local keys, added, importance, value = {}, {}, {}, {}
  for j = 1, n do
    local member = slice[2 * j - 1]
    keys[j], added[j] = key_of_member(member), added_at_of_member(member)
    importance[j] = slice[2 * j]
    value[j] = tonumber(importance[j])
  end
  local function same_run(a, b)
    return added[a] == added[b] and value[a] == value[b]
  end
  -- A run at the end of the slice may go on past it: leave it to the next slice.
  local stop = n
  if not last then
    while stop > 1 and same_run(stop - 1, n) do
      stop = stop - 1
    end
    stop = stop - 1
  end
  if stop == 0 and not last then
    size = 2 * size -- one run fills the slice: read more of it at once
  else
    local tokens = hmget(K_TOKENS, keys)
    local j = 1
    while j <= stop and not done do
      local e = j
      while e < stop and same_run(e + 1, j) do
        e = e + 1
      end
      for i = e, j, -1 do
        if not take(keys[i], tokens[i], importance[i]) then
          break
        end
      end
      j = e + 1
    end
    rank, size = rank + stop, math.min(2 * size, MOST)
  end
until done or last
return reply()
