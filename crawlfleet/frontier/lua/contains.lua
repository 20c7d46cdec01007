-- contains.lua: read-only Bloom membership for a batch ("was this URL seen?").
-- ARGV: [1] prefix, [2] backend 'bitmap'|'native', [3] hashes, [4] segment bits,
--       [5] segments, [6] native filter key, then one item per URL: the 12-byte digest
--       (bitmap) or the URL itself (native).
-- Returns one 1 (probably seen) / 0 (certainly not seen) per item.
local hashes, seg_bits, segments = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local result = {}
if ARGV[2] == 'native' then
  for first = 7, #ARGV, 1000 do
    local r = redis.call('BF.MEXISTS', ARGV[6], unpack(ARGV, first, math.min(first + 999, #ARGV)))
    for i = 1, #r do result[#result + 1] = r[i] end
  end
else
  for i = 7, #ARGV do
    local s, h1, h2 = struct.unpack('<I4I4I4', ARGV[i])
    local key = KEYS[BLOOM_KEY0 + 1 + (s % segments)]
    h2 = (h2 % (seg_bits - 1)) + 1
    local seen = 1
    for j = 0, hashes - 1 do
      if redis.call('GETBIT', key, (h1 + j * h2) % seg_bits) == 0 then seen = 0; break end
    end
    result[#result + 1] = seen
  end
end
return result
