-- lib.lua: shared helpers, prepended to every script by scripts.py (Lua has no include).
--
-- KEYS[1..12] are the job's fixed keys in keys.SCRIPT_KEYS order; KEYS[13..] are the Bloom
-- segments. ARGV[1] is the job's key prefix, from which the per-host queue ("q:<host>") and
-- the per-worker lease set ("owned:<worker>") are derived; both carry the job's hash tag.
--
-- A task is one string: "<attempts>\t<depth>\t<url>\t<parent>". A lease record is
-- "<owner>\t<task>". Queue scores are depth * 2^40 + sequence: breadth-first, FIFO per depth.
-- Time is the server's (TIME), so workers and the operator never disagree about expiry.

if redis.replicate_commands then pcall(redis.replicate_commands) end

local K = {
  meta = KEYS[1], stats = KEYS[2], ready = KEYS[3], inflight = KEYS[4],
  hostlast = KEYS[5], hostdelay = KEYS[6], delayed = KEYS[7], leases = KEYS[8],
  leasedata = KEYS[9], dead = KEYS[10], workers = KEYS[11], heartbeats = KEYS[12],
}
local PREFIX = ARGV[1]
local DEPTH_SCALE = 1099511627776 -- 2^40

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function qkey(host) return PREFIX .. 'q:' .. host end
local function owned_key(worker) return PREFIX .. 'owned:' .. worker end
local function host_of(url) return string.match(url, '^%a+://([^/?#]+)') or '' end

local function split_task(task)
  local attempts, depth, url, parent = string.match(task, '^(%d+)\t(%d+)\t([^\t]*)\t(.*)$')
  return tonumber(attempts), tonumber(depth), url, parent
end

local function make_task(attempts, depth, url, parent)
  return attempts .. '\t' .. depth .. '\t' .. url .. '\t' .. parent
end

-- Job settings written once by init.lua.
local function settings()
  local v = redis.call('HMGET', K.meta, 'per_host', 'host_delay_ms', 'task_attempts',
    'lease_ttl_ms', 'max_pages')
  return {
    per_host = tonumber(v[1]) or 1, host_delay_ms = tonumber(v[2]) or 0,
    task_attempts = tonumber(v[3]) or 1, lease_ttl_ms = tonumber(v[4]) or 60000,
    max_pages = tonumber(v[5]) or 0,
  }
end

-- Queue a task for its host at the given sequence (nil: the front of its depth).
local function push_task(task, depth, url, seq)
  redis.call('ZADD', qkey(host_of(url)), depth * DEPTH_SCALE + (seq or 0), task)
end

-- The delay between two fetches of a host: its own (robots Crawl-delay) or the job's.
local function host_delay(host, cfg)
  return tonumber(redis.call('HGET', K.hostdelay, host)) or cfg.host_delay_ms
end

-- Put a host in the ready index when it has queued work and room under perHost, at its next
-- allowed time (last fetch + delay); take it out otherwise. Called for every host whose
-- state a script changed.
local function refresh_host(host, cfg, now)
  local inflight = tonumber(redis.call('HGET', K.inflight, host)) or 0
  if inflight < cfg.per_host and redis.call('EXISTS', qkey(host)) == 1 then
    local last = tonumber(redis.call('HGET', K.hostlast, host))
    local next_at = now
    if last and last + host_delay(host, cfg) > now then next_at = last + host_delay(host, cfg) end
    redis.call('ZADD', K.ready, next_at, host)
  else
    redis.call('ZREM', K.ready, host)
  end
end

-- Drop one lease: returns its task and host, or nil when `owner` does not hold it (fencing).
-- `owner` false skips the owner check (requeue of expired leases).
local function take_lease(id, owner)
  local rec = redis.call('HGET', K.leasedata, id)
  if not rec then return nil end
  local tab = string.find(rec, '\t', 1, true)
  local holder = string.sub(rec, 1, tab - 1)
  if owner and holder ~= owner then return nil end
  local task = string.sub(rec, tab + 1)
  redis.call('HDEL', K.leasedata, id)
  redis.call('ZREM', K.leases, id)
  redis.call('SREM', owned_key(holder), id)
  local _, _, url = split_task(task)
  local host = host_of(url)
  if redis.call('HINCRBY', K.inflight, host, -1) <= 0 then
    redis.call('HDEL', K.inflight, host)
  end
  return task, host
end

-- Send a failed task to the dead-letter hash (never dropped) or back to work.
-- delay_ms > 0: the delayed set; otherwise the host queue. Returns 'dead' or 'retry'.
local function retry_or_bury(task, fclass, message, delay_ms, retryable, cfg, now)
  local attempts, depth, url, parent = split_task(task)
  attempts = attempts + 1
  if (not retryable) or attempts >= cfg.task_attempts then
    redis.call('HSET', K.dead, url, cjson.encode({
      failure_class = fclass, message = message, attempts = attempts, depth = depth,
      parent = parent, at_ms = now,
    }))
    return 'dead'
  end
  local again = make_task(attempts, depth, url, parent)
  if delay_ms > 0 then
    redis.call('ZADD', K.delayed, now + delay_ms, again)
    return 'delayed'
  end
  local seq = redis.call('HINCRBY', K.stats, 'seq', 1)
  push_task(again, depth, url, seq)
  return 'retry'
end

-- Bitmap Bloom filter: set the k bits of one digest inside its segment (KEYS[13 + segment]).
-- Returns true when any bit was clear, i.e. the URL was not in the filter. Atomic because
-- the whole script is.
local function bitmap_add(digest, hashes, seg_bits, segments)
  local s, h1, h2 = struct.unpack('<I4I4I4', digest)
  local key = KEYS[13 + (s % segments)]
  h2 = (h2 % (seg_bits - 1)) + 1
  local new = false
  for i = 0, hashes - 1 do
    if redis.call('SETBIT', key, (h1 + i * h2) % seg_bits, 1) == 0 then new = true end
  end
  return new
end

-- Native Bloom filter (BF.MADD), in chunks: unpack() is bounded by the Lua C stack.
local function native_madd(key, items)
  local out = {}
  for first = 1, #items, 1000 do
    local last = math.min(first + 999, #items)
    local r = redis.call('BF.MADD', key, unpack(items, first, last))
    for i = 1, #r do out[#out + 1] = r[i] end
  end
  return out
end
