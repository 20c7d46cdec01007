-- file_slot.lua: take one of a host's file download slots (files.perHost) for a lease.
-- ARGV: [1] prefix, [2] epoch, [3] host, [4] lease id, [5] the host's slot limit, [6] ttl ms.
-- A host's slots are a sorted set of lease ids scored by expiry (server time, ms): holders
-- past their expiry (a dead worker's download) are dropped first, so a slot frees itself
-- without anyone's help; a lease that holds a slot already keeps it and gets the new expiry.
-- The key itself expires with its last holder, so a host's slots cost nothing once idle.
-- Returns 1 when the lease holds a slot now, 0 when every slot is taken.
settings()
local key = file_slots_key(ARGV[3])
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
if not redis.call('ZSCORE', key, ARGV[4]) and
    redis.call('ZCARD', key) >= tonumber(ARGV[5]) then
  return 0
end
redis.call('ZADD', key, now + tonumber(ARGV[6]), ARGV[4])
redis.call('PEXPIREAT', key, redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
return 1
