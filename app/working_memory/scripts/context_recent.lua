-- context, recent: last access, newest first.
--
-- The access set read from its top is last access desc, then key desc. A run of equal last
-- access (a batch placed by one request) is put in context order by added_at, then key.
-- Takes keys in order until one does not fit; scores: their last accesses.
local function take_all(keys, scores)
  if done or #keys == 0 then
    return
  end
  local tokens, importance = hmget(K_TOKENS, keys), hmget(K_IMPORTANCE, keys)
  for j = 1, #keys do
    if not take(keys[j], tokens[j], importance[j], scores[j]) then
      return
    end
  end
end

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
      take_all(keys, scores) -- what comes before the run
      keys, scores, nk = {}, {}, 0
      if not done then
        local added, positions = hmget(K_ADDED_AT, run), {}
        for i = 1, #run do
          added[i], positions[i] = tonumber(added[i]), i
        end
        local ordered, same = {}, {}
        for i, p in ipairs(by_added_then_key(positions, run, added, true)) do
          ordered[i], same[i] = run[p], s
        end
        take_all(ordered, same)
      end
    end
    j = e + 1
  end
  take_all(keys, scores)
  size = math.min(2 * size, MOST)
until done or last
return reply()
