-- file_bytes.lua: the job's byte budget for stored files (files.maxTotalBytes).
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] 'reserve' or 'settle', [4] the holder (the download's lease
-- id), then
--   reserve: [5] bytes to reserve, [6] the budget (0: none; the bytes are reserved anyway),
--            [7] how long the reservation lives unless settled or extended (ms);
--   settle:  [5] bytes stored (0 for a duplicate or a failure).
-- FILES.budget holds reserved (downloads in flight) and settled (stored) bytes; a
-- reservation is taken only while reserved + settled + it stays within the budget, in this
-- one script, so concurrent downloads never overshoot it together. Each reservation is its
-- holder's (FILES.reserved_by: bytes by holder) with an expiry (FILES.reservations, extended
-- with the holder's file slot at each heartbeat): a worker killed between reserving and
-- settling leaves a reservation that expires, and every call first drops expired ones, so a
-- kill never shrinks the budget for good. Settling drops the holder's reservation, whatever
-- it was. Numbers past 2^53 are out of reach (the budget's bound is 2^50); values are written
-- with HINCRBY or '%d', never through Lua's number-to-string (which may write an exponent).
-- Returns 1 (reserved, or settled) or 0 (the reservation would pass the budget).
settings()
local mode, holder = ARGV[3], ARGV[4]
local changed = false

-- Drop one holder's reservation: its bytes leave 'reserved' (never below zero: a begin_run
-- dropped every reservation). True when it had one.
local function drop(lease)
  local bytes = tonumber(redis.call('HGET', FILES.reserved_by, lease))
  if not bytes then return false end
  redis.call('HDEL', FILES.reserved_by, lease)
  redis.call('ZREM', FILES.reservations, lease)
  local release = math.min(bytes, tonumber(redis.call('HGET', FILES.budget, 'reserved')) or 0)
  if release > 0 then
    redis.call('HINCRBY', FILES.budget, 'reserved', string.format('%d', -release))
  end
  return true
end

local now = now_ms()
for _, lease in ipairs(redis.call('ZRANGEBYSCORE', FILES.reservations, '-inf', now, 'LIMIT', 0,
    100)) do
  changed = drop(lease) or changed
end
if mode == 'reserve' then
  local bytes, budget, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
  changed = drop(holder) or changed -- a holder asking again replaces its reservation
  local held = redis.call('HMGET', FILES.budget, 'reserved', 'settled')
  local reserved, settled = tonumber(held[1]) or 0, tonumber(held[2]) or 0
  if budget > 0 and reserved + settled + bytes > budget then return 0, changed end
  if bytes == 0 then return 1, changed end
  redis.call('HINCRBY', FILES.budget, 'reserved', ARGV[5])
  redis.call('HSET', FILES.reserved_by, holder, ARGV[5])
  redis.call('ZADD', FILES.reservations, now + ttl, holder)
  return 1, true
end
changed = drop(holder) or changed
if tonumber(ARGV[5]) > 0 then
  redis.call('HINCRBY', FILES.budget, 'settled', ARGV[5])
  changed = true
end
return 1, changed
