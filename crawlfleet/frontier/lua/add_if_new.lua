-- add_if_new.lua: bitmap Bloom "add if new" for a batch, nothing queued. (The native
-- backend needs no script: BF.INSERT is already one atomic command.)
-- ARGV: [1] prefix, [2] epoch, then one 16-byte digest per URL.
-- Returns one 1 (new) / 0 (seen before) per digest; counts new ones in stats.seen. Grows the
-- filter by a layer when its newest is full (lib.lua's bloom_add).
settings()
local filter = bloom_open()
local result, new = {}, 0
for i = 3, #ARGV do
  local is_new = bloom_add(filter, ARGV[i])
  result[#result + 1] = is_new and 1 or 0
  if is_new then new = new + 1 end
end
if new > 0 then redis.call('HINCRBY', K.stats, 'seen', new) end
if #result > new then redis.call('HINCRBY', K.stats, 'duplicates', #result - new) end
return result
