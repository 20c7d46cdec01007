-- lib.lua: shared helpers, prepended to every script by scripts.py (Lua has no include).
--
-- KEYS[1..17] are the job's fixed keys in keys.SCRIPT_KEYS order. ARGV[1] is the job's key
-- prefix, from which the keys named by data are derived: the queues ("q:<depth>:<host>"),
-- the robots.txt fetch locks ("robots-lock:<origin>") and the Bloom segments
-- ("bloom:<layer>:<segment>"); they carry the job's hash tag too. ARGV[2] is the frontier epoch the caller opened (init.lua wrote it into K.meta):
-- every script but init reads the job's settings through settings(), which raises
-- FRONTIER_LOST when K.meta is missing or holds another epoch, so no script ever runs on
-- settings it made up, and a handle of a frontier that was re-created cannot touch the new one.
-- A call id after the epoch makes a state change apply at most once however often the same
-- call is sent (a client's retry after a lost connection re-sends it whole): see once().
--
-- A task is one string: "<attempts>\t<depth>\t<url>\t<parent>". A lease is one member of
-- K.leases, "<lease number>\t<owner>\t@<fetch deadline ms>\t<task>", scored by its expiry:
-- the member is the lease token the worker holds, so completing it is one ZREM that succeeds
-- only while that exact lease exists (fencing for free). The fetch deadline is the claim's
-- time plus the job's fetch budget: the worker sends no request for the lease after it, so
-- a dead worker's requests cannot be running at the site past it (see hold_slot). Tokens of
-- layout 4 before deadlines ("<number>\t<owner>\t<task>") are read as having none. Time is the server's (TIME), so workers and the operator
-- never disagree about expiry.
--
-- Queued tasks are kept compact, since they are what a large frontier is made of: one list
-- per host and depth ("q:<depth>:<host>"), FIFO, popped from the lowest depth first
-- (breadth-first per host), so the depth and the host are in the key, not in each entry. An
-- entry is "<scheme><attempts><rest>": 'h' (http) or 's' (https), the attempts so far
-- (nothing for 0), then the URL after its authority (path and query; it never starts with a
-- digit). A page's children share their parent: a parent entry stands before a run of tasks
-- of that parent, and a non-empty list always starts with one: "~<scheme><rest>" when the
-- parent is on the list's host (the usual case), else "^<parent URL>" ("^" alone: none).
-- Lists keep Redis's listpack encoding at any length, a few bytes per entry on top of the
-- entry itself.

if redis.replicate_commands then pcall(redis.replicate_commands) end

local K = {
  meta = KEYS[1], stats = KEYS[2], ready = KEYS[3], hosts = KEYS[4], delayed = KEYS[5],
  leases = KEYS[6], dead = KEYS[7], workers = KEYS[8], heartbeats = KEYS[9], robots = KEYS[10],
  held = KEYS[11], robots_waits = KEYS[12], robots_wait_status = KEYS[13],
  robots_used = KEYS[14], rv_index = KEYS[15], rv_open = KEYS[16], rv_states = KEYS[17],
}
local PREFIX = ARGV[1]
-- ARGV[2] is "<epoch>", or "<epoch>/<call id>/<keep ms>/<received ids>" for a script run
-- through once(); received ids (comma-separated) are earlier calls whose replies arrived.
local EPOCH, CALL, KEEP_MS, RECEIVED =
  string.match(ARGV[2], '^([^/]*)/?([^/]*)/?(%d*)/?([%w,]*)$')
local PARENT, SAME_HOST_PARENT = 94, 126 -- '^', '~': the bytes that start a parent entry

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function qkey(host, depth) return PREFIX .. 'q:' .. depth .. ':' .. host end
local function robots_lock_key(origin) return PREFIX .. 'robots-lock:' .. origin end
-- The file downloads' keys (keys.py: JobKeys.file_slots, FILE_KEYS): a host's download slots
-- (lease id -> expiry ms), the content index (sha256 -> stored key), the byte budget
-- (reserved, settled) and this run's counters.
local function file_slots_key(host) return PREFIX .. 'files:slots:' .. host end
local FILES = {content = PREFIX .. 'files:content', budget = PREFIX .. 'files:budget',
  counts = PREFIX .. 'files:counts', reservations = PREFIX .. 'files:reservations',
  reserved_by = PREFIX .. 'files:reserved-by'}
local function host_of(url) return string.match(url, '^%a+://([^/?#]+)') or '' end

local function split_task(task)
  local attempts, depth, url, parent = string.match(task, '^(%d+)\t(%d+)\t([^\t]*)\t(.*)$')
  return tonumber(attempts), tonumber(depth), url, parent
end

local function make_task(attempts, depth, url, parent)
  return attempts .. '\t' .. depth .. '\t' .. url .. '\t' .. parent
end

-- Abort the script with FRONTIER_LOST and why (connection.py maps it to FrontierLost).
local function lost(found_epoch)
  local why
  if found_epoch then
    why = 'the frontier was re-created (epoch ' .. found_epoch .. ', this handle opened ' ..
      EPOCH .. ')'
  elseif redis.call('DBSIZE') == 0 then
    why = 'Redis is empty (restarted without its data, or flushed)'
  else
    why = "the job's meta key is missing (deleted or evicted) while Redis holds other keys"
  end
  local job = string.match(PREFIX, '{(.*)}') or PREFIX
  error(redis.error_reply('FRONTIER_LOST job ' .. job .. ': ' .. why))
end

-- The job's settings, written by init.lua; FRONTIER_LOST when they are gone or another
-- epoch's. One HMGET, so every script pays one read for the guarantee. The pressure fields
-- are the fleet's backpressure (set_pressure.lua): links admitted per page (-1: no budget)
-- and claims per second for the whole job (0: no limit). fetch_budget_ms is how long after
-- its claim a worker may still send requests for a lease (0: a frontier opened before it
-- was kept: no slot is held past a death). tracking is '1' once any URL has revisit state
-- (a job without recrawl rules never touches a revisit key), run_cutoff_s the start of the
-- recurring run in progress (revisits due later wait for the next run; nil: no run).
-- Whether a domain budget is set (count_host then counts by domain too): known from the
-- settings' read when the script made it, else read on first use.
local domain_budgets = nil

local function settings()
  local v = redis.call('HMGET', K.meta, 'epoch', 'per_host', 'host_delay_ms', 'task_attempts',
    'lease_ttl_ms', 'max_pages', 'pressure_links_per_page', 'pressure_claims_per_s',
    'fetch_budget_ms', 'tracking', 'run_cutoff_s', 'max_pages_per_domain',
    'max_queued_per_domain')
  if v[1] ~= EPOCH then lost(v[1]) end
  domain_budgets = (tonumber(v[12]) or 0) > 0 or (tonumber(v[13]) or 0) > 0
  return {
    per_host = tonumber(v[2]), host_delay_ms = tonumber(v[3]),
    task_attempts = tonumber(v[4]), lease_ttl_ms = tonumber(v[5]),
    max_pages = tonumber(v[6]), links_per_page = tonumber(v[7]) or -1,
    claims_per_s = tonumber(v[8]) or 0, fetch_budget_ms = tonumber(v[9]) or 0,
    tracking = v[10] == '1', run_cutoff_s = tonumber(v[11]),
  }
end

-- Run a variadic command over a long list in chunks (unpack() is bounded by the C stack).
local function chunked(cmd, key, items)
  for first = 1, #items, 1000 do
    redis.call(cmd, key, unpack(items, first, math.min(first + 999, #items)))
  end
end

-- Per-host state, one field of K.hosts: "<inflight>:<last fetch ms>:<delay ms>:<lowest
-- depth queued>:<highest depth queued>" (last -1: never fetched; delay -1: the job's
-- hostDelaySeconds; depths -1: nothing queued). One HGET reads it all.
local function load_host(host)
  local v = redis.call('HGET', K.hosts, host)
  if not v then return {inflight = 0, last = -1, delay = -1, dmin = -1, dmax = -1} end
  local a, b, c, d, e = string.match(v, '^(-?%d+):(-?%d+):(-?%d+):(-?%d+):(-?%d+)$')
  return {inflight = tonumber(a), last = tonumber(b), delay = tonumber(c), dmin = tonumber(d),
    dmax = tonumber(e)}
end

local function effective_delay(st, cfg)
  if st.delay >= 0 then return st.delay end
  return cfg.host_delay_ms
end

local function save_host(host, st)
  if st.inflight < 0 then st.inflight = 0 end
  redis.call('HSET', K.hosts, host,
    st.inflight .. ':' .. st.last .. ':' .. st.delay .. ':' .. st.dmin .. ':' .. st.dmax)
end

-- When a host may be fetched next: its last fetch plus its delay, or now.
local function next_allowed(st, cfg, now)
  local delay = effective_delay(st, cfg)
  if st.last >= 0 and st.last + delay > now then return st.last + delay end
  return now
end

-- Place a host in the ready index at its next allowed time (last fetch + delay) when it has
-- work queued and room under perHost; take it out otherwise.
local function place_host(host, st, cfg, now)
  if st.inflight < cfg.per_host and st.dmax >= 0 then
    redis.call('ZADD', K.ready, next_allowed(st, cfg, now), host)
  else
    redis.call('ZREM', K.ready, host)
  end
end

-- The hosts held until their robots.txt is asked again (defer_host.lua), for the fleet to
-- say what it waits for: K.robots_waits has "<host>\t<last status>" scored by the next try
-- (ms), so its first member is the next host to change, with its status, in one read;
-- K.robots_wait_status maps each host to its status, to find its member again.
local function clear_robots_wait(host)
  local status = redis.call('HGET', K.robots_wait_status, host)
  if status then
    redis.call('ZREM', K.robots_waits, host .. '\t' .. status)
    redis.call('HDEL', K.robots_wait_status, host)
  end
end

local function settle_host(host, st, cfg, now)
  save_host(host, st)
  place_host(host, st, cfg, now)
end

-- Per-host counts for the frontier's readers (crawlfleet frontier hosts; DESIGN §3 stats),
-- kept by the helpers that move tasks, so the scripts' callers never count: sorted sets,
-- so "the hosts with most queued" is one ZRANGE. HOST_COUNTS.queued holds queued tasks (not
-- list entries: parent entries are not tasks), .crawled acked pages, .dead dead letters,
-- .admitted URLs admitted (scope.maxPagesPerHost counts them, as maxPages counts the job's).
local HOST_COUNTS = {queued = PREFIX .. 'host-queued', crawled = PREFIX .. 'host-crawled',
  dead = PREFIX .. 'host-dead', admitted = PREFIX .. 'host-admitted'}

-- The same two counts by registrable domain (scope.maxQueuedPerDomain, maxPagesPerDomain),
-- kept only while a domain budget is set: HOST_DOMAIN maps each host enqueue.lua admitted to
-- its domain (the workers compute it; Lua has no Public Suffix List).
local DOMAIN_COUNTS = {queued = PREFIX .. 'domain-queued', admitted = PREFIX .. 'domain-admitted'}
local HOST_DOMAIN = PREFIX .. 'host-domain'
local function by_domain()
  if domain_budgets == nil then
    local v = redis.call('HMGET', K.meta, 'max_pages_per_domain', 'max_queued_per_domain')
    domain_budgets = (tonumber(v[1]) or 0) > 0 or (tonumber(v[2]) or 0) > 0
  end
  return domain_budgets
end

local function count_host(which, host, by)
  if by == 0 then return end
  local now_count = tonumber(redis.call('ZINCRBY', HOST_COUNTS[which], by, host))
  if now_count <= 0 then redis.call('ZREM', HOST_COUNTS[which], host) end
  local counts = DOMAIN_COUNTS[which]
  if counts and by_domain() then
    local domain = redis.call('HGET', HOST_DOMAIN, host)
    if domain then
      local in_domain = tonumber(redis.call('ZINCRBY', counts, by, domain))
      if in_domain <= 0 then redis.call('ZREM', counts, domain) end
    end
  end
end

-- A queued entry of a task (the host and depth are its list's), and back.
local function task_entry(url, host, attempts)
  local https = string.byte(url, 5) == 115 -- 's' of "https://"
  local rest = string.sub(url, (https and 9 or 8) + #host)
  if attempts > 0 then return (https and 's' or 'h') .. attempts .. rest end
  return (https and 's' or 'h') .. rest
end

local function entry_task(entry, host, depth, parent)
  local scheme, attempts, rest = string.match(entry, '^([hs])(%d*)(.*)$')
  local url = (scheme == 's' and 'https://' or 'http://') .. host .. rest
  return make_task(tonumber(attempts) or 0, depth, url, parent)
end

-- A parent entry for a list of `host`, and back (nil: not a parent entry).
local function parent_entry(parent, host)
  if host_of(parent) == host and string.match(parent, '^https?://') then
    return '~' .. task_entry(parent, host, 0)
  end
  return '^' .. parent
end

local function entry_parent(entry, host)
  local first = string.byte(entry, 1)
  if first == PARENT then return string.sub(entry, 2) end
  if first == SAME_HOST_PARENT then
    local url = (string.byte(entry, 2) == 115 and 'https://' or 'http://') .. host
    return url .. string.sub(entry, 3)
  end
  return nil
end

-- The host has work at this depth now (st is saved by the caller).
local function note_depth(st, depth)
  if st.dmax < 0 then
    st.dmin, st.dmax = depth, depth
  else
    if depth < st.dmin then st.dmin = depth end
    if depth > st.dmax then st.dmax = depth end
  end
end

-- Queue tasks at the back of one host's list of one depth, in order: urls[i] of parents[i],
-- attempts 0 unless `attempts` says; one parent entry per run of the same parent.
local function push_back(host, depth, urls, parents, attempts)
  local entries, last = {}, nil
  for i, url in ipairs(urls) do
    local parent = parents[i]
    if parent ~= last then
      entries[#entries + 1] = parent_entry(parent, host)
      last = parent
    end
    entries[#entries + 1] = task_entry(url, host, attempts or 0)
  end
  chunked('RPUSH', qkey(host, depth), entries)
  count_host('queued', host, #urls)
end

-- Queue one task (a full task string) at the front of its depth: a lease given back.
local function push_front(task)
  local attempts, depth, url, parent = split_task(task)
  local host = host_of(url)
  redis.call('LPUSH', qkey(host, depth), task_entry(url, host, attempts),
    parent_entry(parent, host))
  count_host('queued', host, 1)
  return host, depth
end

-- Queue one full task at the back of its depth, its host's state updated and saved.
local function requeue_task(task)
  local attempts, depth, url, parent = split_task(task)
  local host = host_of(url)
  push_back(host, depth, {url}, {parent}, attempts)
  local st = load_host(host)
  note_depth(st, depth)
  save_host(host, st)
  return host
end

-- Take up to `want` tasks of one host, lowest depth first, as full task strings; st's depths
-- follow (the caller saves it). A list's head is a parent entry, so the first pop takes one
-- more; a pop that stops inside a run puts the run's parent entry back in front.
local function pop_tasks(host, st, want)
  local tasks = {}
  while #tasks < want and st.dmax >= 0 do
    local depth = st.dmin
    local key = qkey(host, depth)
    local parent, empty = nil, false
    local http, https = '0\t' .. depth .. '\thttp://' .. host, '0\t' .. depth .. '\thttps://' .. host
    while #tasks < want and not empty do
      local got = redis.call('LPOP', key, want - #tasks + (parent and 0 or 1))
      empty = not got
      for _, entry in ipairs(got or {}) do
        local first, second = string.byte(entry, 1, 2)
        if first == PARENT or first == SAME_HOST_PARENT then
          parent = entry_parent(entry, host)
        elseif second and second >= 48 and second <= 57 then -- attempts: a retried task
          tasks[#tasks + 1] = entry_task(entry, host, depth, parent or '')
        else -- the usual task, built in one concatenation
          tasks[#tasks + 1] = (first == 115 and https or http) .. string.sub(entry, 2) ..
            '\t' .. (parent or '')
        end
      end
    end
    if not empty then
      if #tasks > want then -- only if a list had lost its leading parent entry
        local attempts, _, url = split_task(tasks[#tasks])
        redis.call('LPUSH', key, task_entry(url, host, attempts),
          parent_entry(parent or '', host))
        tasks[#tasks] = nil
      else
        local head = redis.call('LINDEX', key, 0)
        empty = not head
        if head and not entry_parent(head, host) then
          redis.call('LPUSH', key, parent_entry(parent or '', host))
        end
      end
    end
    if empty then
      if depth >= st.dmax then st.dmin, st.dmax = -1, -1 else st.dmin = depth + 1 end
    end
  end
  count_host('queued', host, -#tasks)
  return tasks
end

-- A lease whose response has arrived gives its host slot back before it is acked (perHost
-- counts requests in progress, as Scrapy's per-domain limit does): claim renames its member
-- to FETCHED .. token. Workers always send the plain token; scripts try both forms.
local FETCHED = 'f'

-- Split a lease token (plain or fetched form) into its owner, task, fetch deadline (ms; 0:
-- a token from before deadlines) and number.
local function split_lease(token)
  local number, owner, rest = string.match(token, '^f?(%d+)\t([^\t]*)\t(.*)$')
  if not rest then return nil end
  local deadline, task = string.match(rest, '^@(%d+)\t(.*)$')
  if deadline then return owner, task, tonumber(deadline), number end
  return owner, rest, 0, number
end

-- Remove one lease in whichever form exists. Returns removed, and whether it still held its
-- host slot (the plain form).
local function remove_lease(token)
  if string.sub(token, 1, 1) == FETCHED then
    return redis.call('ZREM', K.leases, token) == 1, false
  end
  if redis.call('ZREM', K.leases, FETCHED .. token) == 1 then return true, false end
  return redis.call('ZREM', K.leases, token) == 1, true
end

-- Keep a dead lease's host slot counted until its fetch deadline: its worker may have sent
-- its request just before dying, and the site may still be serving it. One member of K.held
-- per slot ("<host>\t<lease number>", scored by the deadline); release_held gives it back.
local function hold_slot(host, number, deadline)
  redis.call('ZADD', K.held, deadline, host .. '\t' .. number)
end

-- Give back the held slots whose deadline has passed (bounded per call; claims call it, so
-- a held host is placed again by the first claim after its deadline). Returns how many.
local function release_held(cfg, now)
  local due = redis.call('ZRANGEBYSCORE', K.held, '-inf', now, 'LIMIT', 0, 1000)
  if #due == 0 then return 0 end
  chunked('ZREM', K.held, due)
  local per_host = {}
  for _, member in ipairs(due) do
    local host = string.match(member, '^(.*)\t%d+$')
    per_host[host] = (per_host[host] or 0) + 1
  end
  for host, count in pairs(per_host) do
    local st = load_host(host)
    st.inflight = st.inflight - count
    settle_host(host, st, cfg, now)
  end
  return #due
end

-- Remove leases by token, only those `owner` holds (any owner when owner is false): a ZREM
-- answers whether that exact lease still existed. Returns the removed ones ({task=, host=}
-- at the token's index, nil where the caller did not hold it) and the in-flight decrement
-- per host (only leases that still held their slot). Keeps stats.fetched: the leases in the
-- fetched form, whose pages wait for their worker's output to become durable.
-- `hold_at` (a time in ms, or nil) is for leases taken from a holder that is gone: a slot
-- whose fetch deadline is later than it stays counted (hold_slot) instead of coming back.
local function take_leases(tokens, owner, hold_at)
  local taken, per_host, fetched = {}, {}, 0
  for i, token in ipairs(tokens) do
    local holder, task, deadline, number = split_lease(token)
    if task and ((not owner) or holder == owner) then
      local removed, held_slot = remove_lease(token)
      if removed then
        local _, _, url = split_task(task)
        local host = host_of(url)
        taken[i] = {task = task, host = host}
        if not held_slot then
          fetched = fetched + 1
        elseif hold_at and deadline > hold_at then
          hold_slot(host, number, deadline)
        else
          per_host[host] = (per_host[host] or 0) + 1
        end
      end
    end
  end
  if fetched > 0 then redis.call('HINCRBY', K.stats, 'fetched', -fetched) end
  return taken, per_host
end

-- The worker's responses for these leases have arrived: free their host slots now, keep the
-- leases (renamed to the fetched form, same expiry) until ack or fail. Returns the in-flight
-- decrement per host for release_slots.
local function mark_fetched(tokens, owner)
  local per_host, marked = {}, 0
  for _, token in ipairs(tokens) do
    local holder, task = split_lease(token)
    if task and holder == owner and string.sub(token, 1, 1) ~= FETCHED then
      local expiry = redis.call('ZSCORE', K.leases, token)
      if expiry then
        redis.call('ZREM', K.leases, token)
        redis.call('ZADD', K.leases, expiry, FETCHED .. token)
        local _, _, url = split_task(task)
        local host = host_of(url)
        per_host[host] = (per_host[host] or 0) + 1
        marked = marked + 1
      end
    end
  end
  if marked > 0 then redis.call('HINCRBY', K.stats, 'fetched', marked) end
  return per_host
end

-- Give back in-flight slots of hosts whose leases ended, and place each such host again
-- under the limits in force now: whether it was capped is judged against the perHost of the
-- moment, which a running job may have changed since (a host at the old cap left the index,
-- and under a raised cap it would never come back). One ZADD or ZREM per host.
-- `requeued` names hosts that got work back, which must be (re)placed in any case: also
-- those that free no slot here (fetched leases gave theirs back already), since a host
-- whose queue ran dry has left the index and nothing else would put it back.
local function release_slots(per_host, cfg, now, requeued)
  for host, count in pairs(per_host) do
    local st = load_host(host)
    st.inflight = st.inflight - count
    settle_host(host, st, cfg, now)
  end
  for host in pairs(requeued or {}) do
    if not per_host[host] then place_host(host, load_host(host), cfg, now) end
  end
end

-- Send a failed task to the dead-letter hash (never dropped) or back to work.
-- delay_ms > 0: the delayed set; otherwise the host queue, at its back, or at its front with
-- `front` (work a gone worker held: the crawl resumes where it stopped). Returns 'dead',
-- 'delayed', 'retry'. The caller passes requeued hosts to release_slots, so they are placed in
-- the index. `keep` (optional) is asked first about a failure that is final: when it answers
-- true (a tracked URL it scheduled again: see revisit_failed) the URL is not dead-lettered,
-- and the answer is 'kept'.
-- The failure classes that mean the site pushes back (failures.py's PUSHBACK_BACKOFF_MULTIPLIER
-- classes): rate limited (429), refused (403, often a bot wall) or served an empty page.
local PUSHBACK = {http_429 = true, http_403 = true, soft_block = true}

local function retry_or_bury(task, fclass, message, delay_ms, retryable, cfg, now, front, keep)
  local attempts, depth, url, parent = split_task(task)
  attempts = attempts + 1
  if (not retryable) or attempts >= cfg.task_attempts then
    if keep and keep(url, depth) then return 'kept' end
    redis.call('HSET', K.dead, url, cjson.encode({
      failure_class = fclass, message = message, attempts = attempts, depth = depth,
      parent = parent, at_ms = now,
    }))
    count_host('dead', host_of(url), 1)
    return 'dead'
  end
  local again = make_task(attempts, depth, url, parent)
  if delay_ms > 0 then
    redis.call('ZADD', K.delayed, now + delay_ms, again)
    return 'delayed'
  end
  if front then
    local host = push_front(again)
    local st = load_host(host)
    note_depth(st, depth)
    save_host(host, st)
  else
    requeue_task(again)
  end
  return 'retry'
end

-- Bitmap Bloom filter: a chain of layers (bloom.py), each a set of segments
-- ("bloom:<layer>:<segment>"). A digest picks one segment of a layer and its k bit positions
-- ((h1 + i * h2 + i^2 * h3) mod segment bits, triple hashing; the segment's bits are prime)
-- inside it. K.meta holds every layer's shape, computed once
-- when the job was created ('bloom_schedule': "bits:hashes:segments:capacity,..."), and how
-- many are in use ('bloom_layers'); K.stats 'seen' counts what the filter holds.

local function bloom_layer(index, spec)
  local bits, hashes, segments, capacity = string.match(spec, '^(%d+):(%d+):(%d+):(%d+)$')
  segments = tonumber(segments)
  local layer = {
    index = index, seg_bits = tonumber(bits) / segments, hashes = tonumber(hashes),
    segments = segments, capacity = tonumber(capacity), keys = {},
  }
  for s = 0, segments - 1 do layer.keys[s] = PREFIX .. 'bloom:' .. index .. ':' .. s end
  return layer
end

-- The filter of this job, for one script: its layers in use (parsed on demand), what they
-- hold and where the next layer begins.
local function bloom_open()
  local v = redis.call('HMGET', K.meta, 'bloom_layers', 'bloom_schedule')
  local specs = {}
  for spec in string.gmatch(v[2], '[^,]+') do specs[#specs + 1] = spec end
  local f = {specs = specs, layers = {}, in_use = tonumber(v[1]) or 1, room = 0,
    seen = tonumber(redis.call('HGET', K.stats, 'seen')) or 0}
  for i = 1, f.in_use do
    f.layers[i] = bloom_layer(i - 1, specs[i])
    f.room = f.room + f.layers[i].capacity
  end
  return f
end

-- The segment key of a digest and its k bit positions. Three hashes, not two: with double
-- hashing two URLs whose (h1, h2) agree modulo a small segment are one to the filter, which
-- puts a floor of about n/bits^2 under the false-positive rate, far above a tight errorRate
-- (bloom.py). Every term stays below 2^53, so doubles compute it exactly.
local function layer_bits(layer, digest)
  local s, h1, h2, h3 = struct.unpack('<I4I4I4I4', digest)
  local bits = layer.seg_bits
  h1, h2, h3 = h1 % bits, (h2 % (bits - 1)) + 1, h3 % bits
  local positions = {}
  for i = 0, layer.hashes - 1 do
    positions[i + 1] = (h1 + i * h2 + ((i * i) % bits) * h3) % bits
  end
  return layer.keys[s % layer.segments], positions
end

-- Read-only: true when all k bits of one digest are set in this layer.
local function layer_has(layer, digest)
  local key, positions = layer_bits(layer, digest)
  for _, bit in ipairs(positions) do
    if redis.call('GETBIT', key, bit) == 0 then return false end
  end
  return true
end

-- Set the k bits of one digest in this layer; true when any bit was clear (it was new here).
local function layer_set(layer, digest)
  local key, positions = layer_bits(layer, digest)
  local new = false
  for _, bit in ipairs(positions) do
    if redis.call('SETBIT', key, bit, 1) == 0 then new = true end
  end
  return new
end

-- Used memory and maxmemory (0: none), for the one question below.
local function memory_now()
  local info = redis.call('INFO', 'memory')
  return tonumber(string.match(info, 'used_memory:(%d+)')) or 0,
    tonumber(string.match(info, 'maxmemory:(%d+)')) or 0
end

-- Open the next layer, its segments allocated at full size (SETRANGE on a missing key
-- allocates exactly). Not when it would not fit under maxmemory: the newest layer then fills
-- on, and the stats show its rate rising, rather than Redis going past its limit at once.
local function bloom_grow(f)
  local spec = f.specs[f.in_use + 1]
  if not spec then return false end
  local layer = bloom_layer(f.in_use, spec)
  local bytes = math.ceil(layer.seg_bits / 8)
  local used, limit = memory_now()
  if limit > 0 and used + bytes * layer.segments > limit then return false end
  for s = 0, layer.segments - 1 do
    if redis.call('EXISTS', layer.keys[s]) == 0 then
      redis.call('SETRANGE', layer.keys[s], bytes - 1, '\0')
    end
  end
  f.in_use = f.in_use + 1
  f.layers[f.in_use] = layer
  f.room = f.room + layer.capacity
  redis.call('HSET', K.meta, 'bloom_layers', f.in_use)
  return true
end

-- Read-only: true when any layer in use has the digest (probably seen).
local function bloom_has(f, digest)
  for i = f.in_use, 1, -1 do
    if layer_has(f.layers[i], digest) then return true end
  end
  return false
end

-- Add one digest: true when it was new. Older layers are only read (they are full); the
-- newest takes it, after a new layer is opened when the newest is full. Atomic because the
-- script is: of two workers adding one URL, one is told it is new, and one layer is added.
local function bloom_add(f, digest)
  for i = f.in_use - 1, 1, -1 do
    if layer_has(f.layers[i], digest) then return false end
  end
  if f.seen >= f.room and not f.stopped then
    if layer_has(f.layers[f.in_use], digest) then return false end
    f.stopped = not bloom_grow(f) -- ask once per script, not once per URL
  end
  local new = layer_set(f.layers[f.in_use], digest)
  if new then f.seen = f.seen + 1 end
  return new
end

-- A native multi-item Bloom command (BF.MADD, BF.MEXISTS) over a long list, in chunks:
-- unpack() is bounded by the Lua C stack. Returns the concatenated replies.
local function native_multi(cmd, key, items)
  local out = {}
  for first = 1, #items, 1000 do
    local last = math.min(first + 999, #items)
    local r = redis.call(cmd, key, unpack(items, first, last))
    for i = 1, #r do out[#out + 1] = r[i] end
  end
  return out
end

-- Revisit state (revisits.py has the layout). Tracked URLs at rest live in per-host chunks:
-- lists "rv:<k>:<host>" of at most CHUNK elements, each "<state><entry>\t<validators>": the
-- state is struct ">I4I3BB" (due time in whole seconds, interval seconds up to 194 days,
-- visits up to 255, depth up to 255), the entry the URL after its host, its scheme letter
-- standing for the path's leading slash too ('s'/'h': "https://<host>/", 'S'/'H': without
-- the slash), the validators opaque here. Lists, not sorted sets: a list is listpack-encoded
-- at any entry size, where a sorted set of members over 64 bytes needs a server setting that
-- would slow every small sorted set of the job (the leases among them). K.rv_index scores
-- each chunk ("<k>:<host>") by its earliest due time, so due work is found in O(log n) and a
-- chunk is read whole (CHUNK elements at most) to take its due URLs; K.rv_open names each
-- host's chunk that takes new URLs. While a tracked URL is queued or leased its state waits in
-- K.rv_states under its URL, "<state><validators>": the worker reads it in one HMGET, and
-- ack/fail schedule it again from it. Stats: tracked (URLs with state), revisits_due (in
-- rv_states: promoted, not settled), what the visits found (changed, ...), and lag_<i>, a
-- histogram over LAG_BOUNDS (models.LAG_BUCKETS_SECONDS, in ms here).
local STATE = '>I4I3BB'
local STATE_SIZE, MAX_INTERVAL_S, CHUNK = 9, 16777215, 128
local LAG_BOUNDS = {1000, 5000, 15000, 30000, 60000, 120000, 300000, 600000, 1800000, 3600000,
  7200000, 21600000, 86400000}
local CHANGES = {changed = true, unchanged = true, not_modified = true}

local function rvkey(chunk) return PREFIX .. 'rv:' .. chunk end
local function chunk_host(chunk) return string.match(chunk, '^%d+:(.*)$') end

local function rv_entry(url, host)
  local https = string.byte(url, 5) == 115
  local rest = string.sub(url, (https and 9 or 8) + #host)
  if string.byte(rest, 1) == 47 then return (https and 's' or 'h') .. string.sub(rest, 2) end
  return (https and 'S' or 'H') .. rest
end

local function entry_url(entry, host)
  local letter = string.byte(entry, 1)
  local url = ((letter == 115 or letter == 83) and 'https://' or 'http://') .. host
  if letter == 115 or letter == 104 then url = url .. '/' end
  return url .. string.sub(entry, 2)
end

-- An element's entry (between its state and the tab) and its state with the validators.
local function split_element(element)
  local tab = string.find(element, '\t', STATE_SIZE + 1, true)
  return string.sub(element, STATE_SIZE + 1, tab - 1),
    string.sub(element, 1, STATE_SIZE) .. string.sub(element, tab + 1)
end

local function due_of(element) return (struct.unpack('>I4', element)) end

-- Index a chunk at its earliest due time (nil: it is empty, and leaves the index).
local function index_chunk(chunk, earliest)
  if earliest then
    redis.call('ZADD', K.rv_index, earliest, chunk)
  else
    redis.call('ZREM', K.rv_index, chunk)
  end
end

-- Schedule a URL at `from` (ms: now, or when its visit was fetched) + interval with its state (visits so far, depth, validators blob):
-- appended to its host's open chunk, or to a new one when that is full.
local function schedule_revisit(url, depth, interval_ms, visits, blob, from)
  local host = host_of(url)
  local interval_s = math.min(MAX_INTERVAL_S, math.max(1, math.floor(interval_ms / 1000 + 0.5)))
  local due = math.ceil(from / 1000 + interval_s) -- whole seconds, never early
  local k = tonumber(redis.call('HGET', K.rv_open, host)) or 0
  local chunk = k .. ':' .. host
  if k == 0 or redis.call('LLEN', rvkey(chunk)) >= CHUNK then
    k = k + 1
    chunk = k .. ':' .. host
    redis.call('HSET', K.rv_open, host, k)
  end
  redis.call('RPUSH', rvkey(chunk), struct.pack(STATE, due, interval_s, math.min(visits, 255),
    math.min(depth, 255)) .. rv_entry(url, host) .. '\t' .. blob)
  redis.call('ZADD', K.rv_index, 'LT', due, chunk)
end

-- Take one element at rest into its host's queue, due at `due` (the caller removes it from
-- its chunk, counts it and places the host): its state waits in K.rv_states meanwhile.
local function promote_element(host, element, due, st, by_depth)
  local entry, state = split_element(element)
  local url = entry_url(entry, host)
  local _, _, _, depth = struct.unpack(STATE, state)
  redis.call('HSET', K.rv_states, url, struct.pack('>I4', due) .. string.sub(state, 5))
  local urls = by_depth[depth]
  if not urls then
    urls = {}
    by_depth[depth] = urls
  end
  urls[#urls + 1] = url
  note_depth(st, depth)
end

-- Due revisits go to the front of their depth's queue, in due order: they are what a crawl
-- that keeps sites fresh is for, and behind a backlog of a host's new links a listing page
-- due now would wait for all of them.
local function queue_promoted(host, st, by_depth, cfg, now)
  for depth, urls in pairs(by_depth) do
    for i = #urls, 1, -1 do push_front(make_task(0, depth, urls[i], '')) end
  end
  settle_host(host, st, cfg, now)
end

-- Move up to `limit` due URLs at rest into their host queues, earliest chunks first, each
-- chunk's in due order (a recurring run takes only those due by its start). Returns how many.
local function promote_revisits(cfg, now, limit)
  local upto = math.floor(now / 1000)
  if cfg.run_cutoff_s and cfg.run_cutoff_s < upto then upto = cfg.run_cutoff_s end
  local chunks = redis.call('ZRANGEBYSCORE', K.rv_index, '-inf', upto, 'LIMIT', 0, limit)
  local moved = 0
  for _, chunk in ipairs(chunks) do
    if moved >= limit then break end
    local key, host = rvkey(chunk), chunk_host(chunk)
    local due, keep = {}, {}
    for _, element in ipairs(redis.call('LRANGE', key, 0, -1)) do
      local at = due_of(element)
      if at <= upto then due[#due + 1] = {at, element} else keep[#keep + 1] = element end
    end
    table.sort(due, function(a, b) return a[1] < b[1] end)
    local take = math.min(#due, limit - moved)
    local st, by_depth = load_host(host), {}
    for i = 1, take do promote_element(host, due[i][2], due[i][1], st, by_depth) end
    for i = take + 1, #due do keep[#keep + 1] = due[i][2] end
    redis.call('DEL', key)
    local earliest = nil
    if #keep > 0 then
      chunked('RPUSH', key, keep)
      for _, element in ipairs(keep) do
        local at = due_of(element)
        if not earliest or at < earliest then earliest = at end
      end
    end
    index_chunk(chunk, earliest)
    if take > 0 then queue_promoted(host, st, by_depth, cfg, now) end
    moved = moved + take
  end
  if moved > 0 then
    redis.call('HINCRBY', K.stats, 'queued', moved)
    redis.call('HINCRBY', K.stats, 'revisits_due', moved)
  end
  return moved
end

-- Take one URL at rest out of its chunks into its queue, due now (a recurring run's seed).
-- Reads every chunk of its host (only seeds ask). Returns whether it was tracked at rest.
local function promote_at_rest(url, cfg, now)
  local host = host_of(url)
  local entry = rv_entry(url, host)
  for k = 1, tonumber(redis.call('HGET', K.rv_open, host)) or 0 do
    local chunk = k .. ':' .. host
    local elements = redis.call('LRANGE', rvkey(chunk), 0, -1)
    for _, element in ipairs(elements) do
      if split_element(element) == entry then
        redis.call('LREM', rvkey(chunk), 1, element)
        local earliest = nil
        for _, other in ipairs(elements) do
          local at = due_of(other)
          if other ~= element and (not earliest or at < earliest) then earliest = at end
        end
        index_chunk(chunk, earliest)
        local st, by_depth = load_host(host), {}
        promote_element(host, element, math.floor(now / 1000), st, by_depth)
        queue_promoted(host, st, by_depth, cfg, now)
        redis.call('HINCRBY', K.stats, 'queued', 1)
        redis.call('HINCRBY', K.stats, 'revisits_due', 1)
        return true
      end
    end
  end
  return false
end

-- A revisit the worker reported (ack, fail), from ARGV: 6 values per revisit after a count
-- at ARGV[at]: the lease's index among the script's tokens, interval ms, change, lag ms
-- ('' for none), validators blob, and ms since the visit's response arrived (the next visit
-- is due an interval after the fetch, not after the output that holds its record became
-- durable, which may be maxFileAgeSeconds later). Returns them by token index, and the
-- index after them.
local function read_revisits(at)
  local count, found = tonumber(ARGV[at]), {}
  for i = 0, count - 1 do
    local a = at + 1 + i * 6
    found[tonumber(ARGV[a])] = {interval_ms = tonumber(ARGV[a + 1]), change = ARGV[a + 2],
      lag_ms = tonumber(ARGV[a + 3]), blob = ARGV[a + 4], since_ms = tonumber(ARGV[a + 5]) or 0}
  end
  return found, at + 1 + count * 6
end

-- The tracked state of a URL that was queued or leased, taken out of K.rv_states (nil: the
-- URL was not tracked): {due_s, interval_s, visits, blob}.
local function take_revisit_state(url)
  local value = redis.call('HGET', K.rv_states, url)
  if not value then return nil end
  redis.call('HDEL', K.rv_states, url)
  redis.call('HINCRBY', K.stats, 'revisits_due', -1)
  local due, interval_s, visits = struct.unpack(STATE, value)
  return {due_s = due, interval_s = interval_s, visits = visits,
    blob = string.sub(value, STATE_SIZE + 1)}
end

local function forget_revisit(old)
  if old then redis.call('HINCRBY', K.stats, 'tracked', -1) end
end

-- A completed visit of a URL: schedule it again with what the worker reported (rv), or
-- forget it ("gone", or no revisit for a tracked URL: no rule matches it any more).
local function settle_revisit(url, depth, rv, now, cfg)
  local old = nil
  if cfg.tracking then old = take_revisit_state(url) end
  if not rv then
    if old then
      forget_revisit(old)
      redis.call('HINCRBY', K.stats, 'untracked', 1)
    end
    return
  end
  if rv.change == 'gone' then
    forget_revisit(old)
    redis.call('HINCRBY', K.stats, 'gone', 1)
    return
  end
  if not old then
    -- a first visit (a URL at rest is never queued besides: the filter refuses it as a link,
    -- and a recurring run's seeds take it from its set)
    redis.call('HINCRBY', K.stats, 'tracked', 1)
    redis.call('HINCRBY', K.stats, 'new_tracked', 1)
    if not cfg.tracking then
      redis.call('HSET', K.meta, 'tracking', '1')
      cfg.tracking = true
    end
  end
  if CHANGES[rv.change] then redis.call('HINCRBY', K.stats, rv.change, 1) end
  if rv.lag_ms then
    local bucket = #LAG_BOUNDS
    for i, bound in ipairs(LAG_BOUNDS) do
      if rv.lag_ms <= bound then
        bucket = i - 1
        break
      end
    end
    redis.call('HINCRBY', K.stats, 'lag_' .. bucket, 1)
  end
  schedule_revisit(url, depth, rv.interval_ms, (old and old.visits or 0) + 1, rv.blob,
    now - (rv.since_ms or 0))
end

-- A final failure of a URL (retry_or_bury's keep): a tracked one is scheduled again, with
-- the worker's revisit or its kept state, and counted (revisit_failures); "gone" and an
-- untracked URL are dead-lettered as before (false).
local function revisit_failed(url, depth, rv, now, cfg)
  if rv and rv.change == 'gone' then
    settle_revisit(url, depth, rv, now, cfg)
    return false
  end
  if rv then
    settle_revisit(url, depth, {interval_ms = rv.interval_ms, change = 'failed',
      blob = rv.blob, since_ms = rv.since_ms}, now, cfg)
  else
    if not cfg.tracking then return false end
    local old = take_revisit_state(url)
    if not old then return false end
    schedule_revisit(url, depth, old.interval_s * 1000, old.visits, old.blob, now)
  end
  redis.call('HINCRBY', K.stats, 'revisit_failures', 1)
  return true
end

-- Run a script's body (a function returning its reply and whether it changed anything) once
-- per call id: the reply of a call that changed state is kept under "reply:<call id>" for
-- KEEP_MS, and the same call sent again gets that reply instead of applying a second time
-- (a second claim, a fail counted twice, an ack answered "not yours"). A call that changed
-- nothing keeps nothing: running it again is as good as the first. No call id: run it.
-- The replies of the caller's earlier calls that reached it are dropped here: nobody sends
-- those again, and a claim's reply (its URLs) kept for KEEP_MS at a fast crawl's rate would
-- hold megabytes, written past maxmemory (the scripts that call once() are allow-oom).
local function once(body)
  if CALL == '' then return (body()) end
  local key = PREFIX .. 'reply:' .. CALL
  local kept = redis.call('GET', key)
  local reply, changed
  if kept then
    reply = cjson.decode(kept)
  else
    reply, changed = body() -- a lost frontier raises here, before anything is written
    if changed then redis.call('SET', key, cjson.encode(reply), 'PX', tonumber(KEEP_MS)) end
  end
  for id in string.gmatch(RECEIVED or '', '[^,]+') do
    redis.call('DEL', PREFIX .. 'reply:' .. id)
  end
  return reply
end
