-- place: add or update items in order, evicting until each fits. See place_items.
if not initialized() then
  return { 'NOINIT' }
end
local current = tonumber(redis.call('HGET', K_META, 'tokens'))
local total, admitted, rejected, evicted, evicted_ids, other_ids, times = place_items(current)
local seq = bump_seq()
emit_placed(seq, admitted, evicted)
return { 'OK', gen(), seq, total, admitted, rejected, evicted, evicted_ids, other_ids, times }
