-- init.lua: create the job's settings once; later callers get the stored ones.
-- ARGV: [1] prefix, then field/value pairs (settings and Bloom shape).
-- Returns the stored meta hash as a flat field/value list. Creates the bitmap segments. The first writer wins, so every
-- worker and the operator agree on one Bloom shape even if their specs differ later.
if redis.call('EXISTS', K.meta) == 0 then
  for i = 2, #ARGV, 2 do redis.call('HSET', K.meta, ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', K.meta, 'created_ms', now_ms())
else
  -- Settings that may change between runs (not the Bloom shape): later values win.
  for i = 2, #ARGV, 2 do
    if string.sub(ARGV[i], 1, 6) ~= 'bloom_' then
      redis.call('HSET', K.meta, ARGV[i], ARGV[i + 1])
    end
  end
end
-- Allocate bitmap segments at their full size once: SETRANGE on a missing key allocates
-- exactly, where SETBIT's growth would leave up to twice the memory reserved.
local shape = redis.call('HMGET', K.meta, 'bloom_backend', 'bloom_bits', 'bloom_segments')
if shape[1] == 'bitmap' then
  local segments = tonumber(shape[3])
  local bytes = math.ceil(tonumber(shape[2]) / segments / 8)
  for i = 0, segments - 1 do
    local key = PREFIX .. 'bloom:' .. i
    if redis.call('EXISTS', key) == 0 then redis.call('SETRANGE', key, bytes - 1, '\0') end
  end
end
return redis.call('HGETALL', K.meta)
