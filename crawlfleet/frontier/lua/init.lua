-- init.lua: create the job's frontier once, or join the one that exists.
-- ARGV: [1] prefix, [2] the epoch the caller remembers ('' when it remembers none),
--       [3] a fresh epoch id, [4] the key layout version this code speaks,
--       then field/value pairs (settings and Bloom shape).
-- Returns {'ok', field, value, ...} (the stored meta), {'lost', why} when the caller
-- remembers an epoch that Redis no longer holds (nothing is written), or {'layout', found}
-- when the keys were written by another layout (nothing is read or written).
-- The first writer wins the Bloom shape and the partition count ('shards'), so every worker
-- and the operator agree on them even if their specs differ later (frontier.py refuses an
-- opener whose shards differ); other settings take the latest opener's values.
local remembered, fresh, layout = ARGV[2], ARGV[3], ARGV[4]
local stored = redis.call('HMGET', K.meta, 'epoch', 'layout')
if not stored[1] and redis.call('EXISTS', K.meta) == 1 then
  return {'layout', '1'} -- meta from before epochs: the first layout
end
if stored[1] and stored[2] ~= layout then return {'layout', stored[2] or '1'} end
if remembered ~= '' and stored[1] ~= remembered then
  if stored[1] then
    return {'lost', 'the frontier was re-created (epoch ' .. stored[1] .. ', created ' ..
      (redis.call('HGET', K.meta, 'created_ms') or '?') .. ' ms; this process remembers ' ..
      remembered .. ')'}
  elseif redis.call('DBSIZE') == 0 then
    return {'lost', 'Redis is empty (restarted without its data, or flushed)'}
  end
  return {'lost', "the job's meta key is missing (deleted or evicted) while Redis holds " ..
    'other keys'}
end
if not stored[1] then
  for i = 5, #ARGV, 2 do redis.call('HSET', K.meta, ARGV[i], ARGV[i + 1]) end
  redis.call('HSET', K.meta, 'epoch', fresh, 'layout', layout, 'created_ms', now_ms())
else
  -- Settings that may change between runs (not the Bloom shape, nor shards): later values win.
  for i = 5, #ARGV, 2 do
    if string.sub(ARGV[i], 1, 6) ~= 'bloom_' and ARGV[i] ~= 'shards' then
      redis.call('HSET', K.meta, ARGV[i], ARGV[i + 1])
    end
  end
end
-- Allocate the first layer's bitmap segments at their full size once: SETRANGE on a missing
-- key allocates exactly, where SETBIT's growth would leave up to twice the memory reserved.
local shape = redis.call('HMGET', K.meta, 'bloom_backend', 'bloom_schedule')
if shape[1] == 'bitmap' then
  redis.call('HSETNX', K.meta, 'bloom_layers', 1)
  local first = bloom_layer(0, string.match(shape[2], '^[^,]+'))
  local bytes = math.ceil(first.seg_bits / 8)
  for s = 0, first.segments - 1 do
    if redis.call('EXISTS', first.keys[s]) == 0 then
      redis.call('SETRANGE', first.keys[s], bytes - 1, '\0')
    end
  end
end
local out = {'ok'}
for _, v in ipairs(redis.call('HGETALL', K.meta)) do out[#out + 1] = v end
return out
