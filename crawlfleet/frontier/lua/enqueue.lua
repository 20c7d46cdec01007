-- enqueue.lua: admit links: dedup through the Bloom filter, queue the new ones per host.
-- ARGV: [1] prefix, [2] backend 'bitmap'|'native', [3] hashes, [4] segment bits,
--       [5] segments, [6] '1' to mark the job seeded, [7] native filter key ('' for bitmap),
--       then 4 values per link: url, depth, parent, digest ('' for native).
-- Returns one code per link: 1 new and queued, 0 seen before, 2 refused: maxPages reached
-- (not added to the filter, so a larger maxPages later can still take it).
local backend = ARGV[2]
local hashes, seg_bits, segments = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local native_key = ARGV[7]
local cfg = settings()
local now = now_ms()
local count = (#ARGV - 7) / 4
local admitted = tonumber(redis.call('HGET', K.stats, 'admitted')) or 0
local limited = cfg.max_pages > 0

-- Unlimited native path: one BF.MADD for the batch.
local bulk = nil
if backend == 'native' and not limited then
  local urls = {}
  for i = 0, count - 1 do urls[#urls + 1] = ARGV[8 + i * 4] end
  bulk = native_multi('BF.MADD', native_key, urls)
end

local result, touched = {}, {}
local new, dup, refused = 0, 0, 0
local seq = redis.call('HINCRBY', K.stats, 'seq', count) - count
for i = 0, count - 1 do
  local base = 8 + i * 4
  local url = ARGV[base]
  local code
  if limited and admitted >= cfg.max_pages then
    code = 2
  else
    local is_new
    if bulk then
      is_new = bulk[i + 1] == 1
    elseif backend == 'native' then
      is_new = redis.call('BF.ADD', native_key, url) == 1
    else
      is_new = bitmap_add(ARGV[base + 3], hashes, seg_bits, segments)
    end
    code = is_new and 1 or 0
  end
  if code == 1 then
    local depth = tonumber(ARGV[base + 1])
    push_task(make_task(0, depth, url, ARGV[base + 2]), depth, url, seq + i + 1)
    touched[host_of(url)] = true
    admitted = admitted + 1
    new = new + 1
  elseif code == 0 then
    dup = dup + 1
  else
    refused = refused + 1
  end
  result[i + 1] = code
end

for host in pairs(touched) do place_host(host, load_host(host), cfg, now) end
if new > 0 then
  redis.call('HINCRBY', K.stats, 'queued', new)
  redis.call('HINCRBY', K.stats, 'seen', new)
  redis.call('HSET', K.stats, 'admitted', admitted)
end
if dup > 0 then redis.call('HINCRBY', K.stats, 'duplicates', dup) end
if refused > 0 then redis.call('HINCRBY', K.stats, 'over_limit', refused) end
if ARGV[6] == '1' then redis.call('HSETNX', K.meta, 'seeded_ms', now) end
return result
