-- file_slots_extend.lua: push the expiry of file download slots still held (the worker's
-- heartbeat during long downloads), and of the byte reservations the same leases hold
-- (file_bytes.lua: a download being stored).
-- ARGV: [1] prefix, [2] epoch, [3] ttl ms, then host, lease id pairs.
-- A slot or reservation already dropped (its holder was late past its expiry and another
-- lease may have taken the room) is not taken back: only those still held are extended.
-- Returns how many slots were extended.
settings()
local expires = now_ms() + tonumber(ARGV[3])
local extended = 0
for i = 4, #ARGV - 1, 2 do
  local key = file_slots_key(ARGV[i])
  if redis.call('ZSCORE', key, ARGV[i + 1]) then
    redis.call('ZADD', key, 'XX', expires, ARGV[i + 1])
    extended = extended + 1
    redis.call('PEXPIREAT', key, redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  redis.call('ZADD', FILES.reservations, 'XX', expires, ARGV[i + 1])
end
return extended
