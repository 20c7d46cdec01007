-- begin_run.lua: start a recurring run from the state the last successful run committed.
-- ARGV: [1] prefix, [2] epoch, [3] run id.
-- Drops the transient state of whatever ran before (queues, the ready and host indexes,
-- retries, leases, held slots, dead letters, the output ledger, counters but the lease
-- sequence, the seeded mark) and the working dedup filter and revisit schedule, then copies
-- the committed ones back (commit_run.lua wrote them under run:...), or starts them empty:
-- the first layer of a bitmap filter allocated as init.lua does; a native filter is
-- reserved again by the caller. Revisits due after this moment wait for the next run
-- (run_cutoff_s). Of the file downloads' keys, the run's counters go and the bytes reserved
-- by downloads of the run before (none is in flight now); the content index and the bytes
-- settled stay, as the stored files they describe do: a file stored by an earlier run is a
-- duplicate in this one, and files.maxTotalBytes counts the job's stored bytes, every run's.
-- Host file slots stay too: each expires with its download. No commit is needed for them:
-- an entry is written only once its file is durable, whether its run succeeds or not.
-- Returns {committed run id or '', tracked URLs restored}.
local cfg = settings()
local now = now_ms()
local function copy(from, to)
  if redis.call('EXISTS', from) == 0 then return end
  if not pcall(redis.call, 'COPY', from, to, 'REPLACE') then -- a module type without copy
    redis.call('RESTORE', to, 0, redis.call('DUMP', from), 'REPLACE')
  end
end
local function bloom_keys(layers, prefix)
  local found = {}
  local specs = {}
  for spec in string.gmatch(redis.call('HGET', K.meta, 'bloom_schedule') or '', '[^,]+') do
    specs[#specs + 1] = spec
  end
  for index = 0, layers - 1 do
    if specs[index + 1] then
      local layer = bloom_layer(index, specs[index + 1])
      for s = 0, layer.segments - 1 do
        found[#found + 1] = {PREFIX .. 'bloom:' .. index .. ':' .. s,
          PREFIX .. prefix .. 'bloom:' .. index .. ':' .. s}
      end
    end
  end
  return found
end

-- 1. The transient state of the run before.
for _, host in ipairs(redis.call('HKEYS', K.hosts)) do
  local st = load_host(host)
  if st.dmax >= 0 then
    for depth = st.dmin, st.dmax do redis.call('DEL', qkey(host, depth)) end
  end
end
for _, chunk in ipairs(redis.call('ZRANGE', K.rv_index, 0, -1)) do redis.call('DEL', rvkey(chunk)) end
for _, pair in ipairs(bloom_keys(tonumber(redis.call('HGET', K.meta, 'bloom_layers')) or 1, '')) do
  redis.call('DEL', pair[1])
end
redis.call('DEL', K.ready, K.hosts, K.delayed, K.leases, K.dead, K.held, K.robots_waits,
  K.robots_wait_status, K.rv_index, K.rv_open, K.rv_states, PREFIX .. 'bf', PREFIX .. 'output',
  PREFIX .. 'output-finished', PREFIX .. 'output-finisher', FILES.counts, FILES.reservations,
  FILES.reserved_by, HOST_COUNTS.queued, HOST_COUNTS.crawled, HOST_COUNTS.dead,
  HOST_COUNTS.admitted, DOMAIN_COUNTS.queued, DOMAIN_COUNTS.admitted)
redis.call('HDEL', FILES.budget, 'reserved')
local sequence = redis.call('HGET', K.stats, 'lease_seq')
redis.call('DEL', K.stats)
if sequence then redis.call('HSET', K.stats, 'lease_seq', sequence) end
redis.call('HDEL', K.meta, 'seeded_ms', 'tracking')

-- 2. The committed state, or an empty one.
local committed = redis.call('HMGET', PREFIX .. 'run:meta', 'run_id', 'bloom_layers', 'seen',
  'tracked')
local layers, tracked = tonumber(committed[2]) or 1, tonumber(committed[4]) or 0
if committed[1] then
  for _, pair in ipairs(bloom_keys(layers, 'run:')) do copy(pair[2], pair[1]) end
  copy(PREFIX .. 'run:bf', PREFIX .. 'bf')
  -- each host's chunks numbered 1..m again (the ids grow as chunks fill and drain), so a
  -- tracked seed is looked for in the chunks its host has, no more (promote_at_rest)
  local chunks, count = redis.call('ZRANGE', PREFIX .. 'run:rv-index', 0, -1, 'WITHSCORES'), {}
  for i = 1, #chunks, 2 do
    local host = chunk_host(chunks[i])
    count[host] = (count[host] or 0) + 1
    local chunk = count[host] .. ':' .. host
    copy(PREFIX .. 'run:rv:' .. chunks[i], rvkey(chunk))
    redis.call('ZADD', K.rv_index, chunks[i + 1], chunk)
  end
  for host, last in pairs(count) do redis.call('HSET', K.rv_open, host, last) end
  redis.call('HSET', K.stats, 'seen', committed[3] or 0, 'tracked', tracked)
  if tracked > 0 then redis.call('HSET', K.meta, 'tracking', '1') end
end
redis.call('HSET', K.meta, 'bloom_layers', layers)
if not committed[1] and redis.call('HGET', K.meta, 'bloom_backend') == 'bitmap' then
  local first = bloom_layer(0, string.match(redis.call('HGET', K.meta, 'bloom_schedule'),
    '^[^,]+'))
  for s = 0, first.segments - 1 do
    redis.call('SETRANGE', first.keys[s], math.ceil(first.seg_bits / 8) - 1, '\0')
  end
end
redis.call('HSET', K.meta, 'run_id', ARGV[3], 'run_cutoff_s', math.floor(now / 1000))
return {committed[1] or '', tracked}
