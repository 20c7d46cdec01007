-- commit_run.lua: keep this run's dedup filter and revisit schedule as the committed state
-- the next begin_run.lua restores (the copy lives under run:..., in the job's hash tag).
-- ARGV: [1] prefix, [2] epoch, [3] run id (refused unless it is the run begun last).
-- Tracked URLs still queued or leased (a run's queue has drained when it commits, so
-- normally none) are kept in the copy at the time they became due: never lost.
-- Returns {'ok', tracked} or {'not_current', the run in progress or ''}.
local cfg = settings()
local current = redis.call('HGET', K.meta, 'run_id')
if current ~= ARGV[3] then return {'not_current', current or ''} end
local function copy(from, to)
  redis.call('DEL', to)
  if redis.call('EXISTS', from) == 0 then return end
  if not pcall(redis.call, 'COPY', from, to, 'REPLACE') then
    redis.call('RESTORE', to, 0, redis.call('DUMP', from), 'REPLACE')
  end
end
local RUN = PREFIX .. 'run:'

-- 1. Drop the copy before.
local before = redis.call('HGET', RUN .. 'meta', 'bloom_layers')
for _, chunk in ipairs(redis.call('ZRANGE', RUN .. 'rv-index', 0, -1)) do
  redis.call('DEL', RUN .. 'rv:' .. chunk)
end
local specs = {}
for spec in string.gmatch(redis.call('HGET', K.meta, 'bloom_schedule') or '', '[^,]+') do
  specs[#specs + 1] = spec
end
local function each_segment(layers, fn)
  for index = 0, layers - 1 do
    if specs[index + 1] then
      local layer = bloom_layer(index, specs[index + 1])
      for s = 0, layer.segments - 1 do fn('bloom:' .. index .. ':' .. s) end
    end
  end
end
each_segment(tonumber(before) or 0, function(name) redis.call('DEL', RUN .. name) end)
redis.call('DEL', RUN .. 'rv-index', RUN .. 'rv-open', RUN .. 'bf', RUN .. 'meta')

-- 2. Copy this run's.
local layers = tonumber(redis.call('HGET', K.meta, 'bloom_layers')) or 1
each_segment(layers, function(name) copy(PREFIX .. name, RUN .. name) end)
copy(PREFIX .. 'bf', RUN .. 'bf')
for _, chunk in ipairs(redis.call('ZRANGE', K.rv_index, 0, -1)) do
  copy(rvkey(chunk), RUN .. 'rv:' .. chunk)
end
copy(K.rv_index, RUN .. 'rv-index')
copy(K.rv_open, RUN .. 'rv-open')
-- each host's tracked URLs still queued or leased: a chunk of their own in the copy, past
-- the host's open one
local pending = redis.call('HGETALL', K.rv_states)
local folded = {}
for i = 1, #pending, 2 do
  local url, value = pending[i], pending[i + 1]
  local host = host_of(url)
  local k = folded[host]
  if not k then
    k = (tonumber(redis.call('HGET', RUN .. 'rv-open', host)) or 0) + 1
    folded[host] = k
    redis.call('HSET', RUN .. 'rv-open', host, k)
  end
  local chunk = k .. ':' .. host
  redis.call('RPUSH', RUN .. 'rv:' .. chunk, string.sub(value, 1, STATE_SIZE) ..
    rv_entry(url, host) .. '\t' .. string.sub(value, STATE_SIZE + 1))
  redis.call('ZADD', RUN .. 'rv-index', 'LT', due_of(value), chunk)
end
local stats = redis.call('HMGET', K.stats, 'seen', 'tracked')
redis.call('HSET', RUN .. 'meta', 'run_id', ARGV[3], 'committed_ms', now_ms(),
  'bloom_layers', layers, 'seen', stats[1] or 0, 'tracked', stats[2] or 0)
return {'ok', tonumber(stats[2]) or 0}
