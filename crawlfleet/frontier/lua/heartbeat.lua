-- heartbeat.lua: record that a worker is alive, with its counters.
-- ARGV: [1] prefix, [2] worker id, [3] counters as JSON ('' to remove the worker: it left).
-- Returns the server time in ms, so callers can judge ages on one clock.
local now = now_ms()
if ARGV[3] == '' then
  redis.call('HDEL', K.workers, ARGV[2])
  redis.call('ZREM', K.heartbeats, ARGV[2])
else
  redis.call('HSET', K.workers, ARGV[2], ARGV[3])
  redis.call('ZADD', K.heartbeats, now, ARGV[2])
end
return now
