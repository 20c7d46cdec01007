-- contains.lua: read-only Bloom membership for a batch ("was this URL seen?").
-- ARGV: [1] prefix, [2] epoch, [3] backend 'bitmap'|'native', [4] native filter key, then
--       one item per URL: the 16-byte digest (bitmap) or the URL itself (native).
-- Returns one 1 (probably seen, in any layer) / 0 (certainly not seen) per item.
settings()
local items = {}
for i = 5, #ARGV do items[#items + 1] = ARGV[i] end
if ARGV[3] == 'native' then return native_multi('BF.MEXISTS', ARGV[4], items) end
local filter = bloom_open()
local result = {}
for i, digest in ipairs(items) do
  result[i] = bloom_has(filter, digest) and 1 or 0
end
return result
