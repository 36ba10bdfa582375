-- outline: every item's key and the numbers an order and a budget need (tokens, importance,
-- added_at, last access), without contents, read in one atomic step: a prompt fits a
-- thousand items by these and then reads only the contents it takes (contents.lua).
-- Reply: OK, tokens, keys in eviction order, then four JSON arrays in the keys' order
-- (tokens, importance, added_at, last access: the stored text, parsed by Python in one call
-- each).
if not initialized() then
  return { 'NOINIT' }
end
local keys = {}
for i, member in ipairs(redis.call('ZRANGE', K_EVICT, 0, -1)) do
  keys[i] = key_of_member(member)
end
local access = {}
for a = 1, #keys, HMGET_SLICE do
  local got = redis.call('ZMSCORE', K_ACCESS, unpack(keys, a, math.min(a + HMGET_SLICE - 1, #keys)))
  for j = 1, #got do
    access[a + j - 1] = got[j]
  end
end
local function json_array(values)
  for i = 1, #keys do
    if not values[i] then
      error('working memory inconsistent: ' .. keys[i] .. ' lacks a field')
    end
  end
  return '[' .. table.concat(values, ',') .. ']'
end
return { 'OK', redis.call('HGET', K_META, 'tokens'), keys, json_array(hmget(K_TOKENS, keys)),
  json_array(hmget(K_IMPORTANCE, keys)), json_array(hmget(K_ADDED_AT, keys)),
  json_array(access) }
