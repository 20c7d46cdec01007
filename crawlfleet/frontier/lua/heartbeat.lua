-- heartbeat.lua: record that a worker is alive, with its counters.
-- ARGV: [1] prefix, [2] epoch, [3] worker id, [4] counters as JSON ('' to remove the worker:
--       it left).
-- Returns the server time in ms, so callers can judge ages on one clock.
settings()
local now = now_ms()
if ARGV[4] == '' then
  redis.call('HDEL', K.workers, ARGV[3])
  redis.call('ZREM', K.heartbeats, ARGV[3])
else
  redis.call('HSET', K.workers, ARGV[3], ARGV[4])
  redis.call('ZADD', K.heartbeats, now, ARGV[3])
end
return now
