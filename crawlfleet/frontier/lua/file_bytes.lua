-- file_bytes.lua: the job's byte budget for stored files (files.maxTotalBytes).
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] 'reserve' or 'settle', then
--   reserve: [4] bytes to reserve, [5] the budget (0: none; the bytes are reserved anyway);
--   settle:  [4] bytes reserved before, now released, [5] bytes stored (0 for a duplicate).
-- FILES.budget holds reserved (downloads in flight) and settled (stored) bytes; a
-- reservation is taken only while reserved + settled + it stays within the budget, in this
-- one script, so concurrent downloads never overshoot it together. Numbers past 2^53 are
-- out of reach (the budget's bound is 2^50); values are written with HINCRBY or '%d', never
-- through Lua's number-to-string (which may write an exponent).
-- Returns 1 (reserved, or settled) or 0 (the reservation would pass the budget).
settings()
local mode, first, second = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local held = redis.call('HMGET', FILES.budget, 'reserved', 'settled')
local reserved, settled = tonumber(held[1]) or 0, tonumber(held[2]) or 0
if mode == 'reserve' then
  if second > 0 and reserved + settled + first > second then return 0, false end
  if first == 0 then return 1, false end
  redis.call('HINCRBY', FILES.budget, 'reserved', ARGV[4])
  return 1, true
end
-- settle: a reservation a begin_run dropped (or never made) releases nothing below zero
local release = math.min(first, reserved)
if release > 0 then
  redis.call('HINCRBY', FILES.budget, 'reserved', string.format('%d', -release))
end
if second > 0 then redis.call('HINCRBY', FILES.budget, 'settled', ARGV[5]) end
return 1, release > 0 or second > 0
