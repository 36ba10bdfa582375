-- outline: every item's key and the numbers an order and a budget need (tokens, importance,
-- added_at, last access), without contents, read in one atomic step: a prompt fits a
-- thousand items by these and then reads only the contents it takes (contents.lua).
-- Reply: OK, tokens, keys in eviction order, then four JSON arrays in the keys' order
-- (tokens, importance, added_at, last access).
if load_pending() then
  return { 'PENDING' }
end
if not initialized() then
  return { 'NOINIT' }
end
local keys = held_keys()
local function numbers(values) -- every held item has every field
  for i = 1, #keys do
    if not values[i] then
      error('working memory inconsistent: ' .. keys[i] .. ' lacks a field')
    end
  end
  return json_array(values)
end
return { 'OK', redis.call('HGET', K_META, 'tokens'), keys, numbers(hmget(K_TOKENS, keys)),
  numbers(hmget(K_IMPORTANCE, keys)), numbers(hmget(K_ADDED_AT, keys)),
  numbers(sliced('ZMSCORE', K_ACCESS, keys)) }
