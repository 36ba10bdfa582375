-- pending: a recall's load of this robot is pending (ARGV[1] = 'add', ARGV[2] = the load's
-- token) or loads are done (ARGV[1] = 'done', ARGV[2..] = their tokens). With 'add', ARGV[3] =
-- how long it may stay pending (ms):
-- its deadline, in Redis's clock, after which the read scripts stop waiting for it (the
-- process that took the load died). Expired tokens are dropped on the way. Reply: OK.
local now = redis_ms()
redis.call('ZREMRANGEBYSCORE', K_PENDING, '-inf', now)
if ARGV[1] == 'add' then
  redis.call('ZADD', K_PENDING, now + tonumber(ARGV[3]), ARGV[2])
  redis.call('PEXPIRE', K_PENDING, tonumber(ARGV[3]))
else
  for i = 2, #ARGV do
    redis.call('ZREM', K_PENDING, ARGV[i])
  end
end
return { 'OK' }
