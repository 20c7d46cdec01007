-- add_if_new.lua: Bloom "add if new" for a batch, nothing queued.
-- ARGV: [1] prefix, [2] backend 'bitmap'|'native', [3] hashes, [4] segment bits,
--       [5] segments, [6] native filter key, then one item per URL: the 12-byte digest
--       (bitmap) or the URL itself (native).
-- Returns one 1 (new) / 0 (seen before) per item; counts new items in stats.seen.
local hashes, seg_bits, segments = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local result, new = {}, 0
if ARGV[2] == 'native' then
  local items = {}
  for i = 7, #ARGV do items[#items + 1] = ARGV[i] end
  result = native_madd(ARGV[6], items)
  for i = 1, #result do new = new + result[i] end
else
  for i = 7, #ARGV do
    local is_new = bitmap_add(ARGV[i], hashes, seg_bits, segments)
    result[#result + 1] = is_new and 1 or 0
    if is_new then new = new + 1 end
  end
end
if new > 0 then redis.call('HINCRBY', K.stats, 'seen', new) end
if #result > new then redis.call('HINCRBY', K.stats, 'duplicates', #result - new) end
return result
