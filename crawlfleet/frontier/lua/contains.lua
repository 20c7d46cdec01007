-- contains.lua: read-only Bloom membership for a batch ("was this URL seen?").
-- ARGV: [1] prefix, [2] backend 'bitmap'|'native', [3] hashes, [4] segment bits,
--       [5] segments, [6] native filter key, then one item per URL: the 12-byte digest
--       (bitmap) or the URL itself (native).
-- Returns one 1 (probably seen) / 0 (certainly not seen) per item.
local hashes, seg_bits, segments = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local items = {}
for i = 7, #ARGV do items[#items + 1] = ARGV[i] end
if ARGV[2] == 'native' then return native_multi('BF.MEXISTS', ARGV[6], items) end
local result = {}
for i, digest in ipairs(items) do
  result[i] = bitmap_has(digest, hashes, seg_bits, segments) and 1 or 0
end
return result
