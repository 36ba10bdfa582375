-- contents: the contents and token counts of the ARGV keys (false where a key holds no
-- item), read in one atomic step: what a prompt takes after fitting an outline (outline.lua).
-- The counts let the caller see that a key still holds the item it fitted.
if not initialized() then
  return { 'NOINIT' }
end
return { 'OK', hmget(K_CONTENT, ARGV), hmget(K_TOKENS, ARGV) }
