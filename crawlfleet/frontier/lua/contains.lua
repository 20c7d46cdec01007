-- contains.lua: read-only Bloom membership for a batch ("was this URL seen?").
-- ARGV: [1] prefix, [2] epoch, [3] backend 'bitmap'|'native', [4] hashes, [5] segment bits,
--       [6] segments, [7] native filter key, then one item per URL: the 12-byte digest
--       (bitmap) or the URL itself (native).
-- Returns one 1 (probably seen) / 0 (certainly not seen) per item.
settings()
local hashes, seg_bits, segments = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local items = {}
for i = 8, #ARGV do items[#items + 1] = ARGV[i] end
if ARGV[3] == 'native' then return native_multi('BF.MEXISTS', ARGV[7], items) end
local result = {}
for i, digest in ipairs(items) do
  result[i] = bitmap_has(digest, hashes, seg_bits, segments) and 1 or 0
end
return result
