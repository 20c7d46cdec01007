-- enqueue.lua: admit links: dedup through the Bloom filter, queue the new ones per host.
-- ARGV: [1] prefix, [2] epoch, [3] backend 'bitmap'|'native', [4] '1' for the last batch of
--       seeds (marks the job seeded; no per-page budget), '2' for an earlier batch of them (no
--       budget, not marked yet: a crash mid-list seeds it again, and the filter refuses the
--       repeats), '0' for discovered links, [5] native filter key ('' for bitmap), [6] the
--       batch's hosts and their registrable domains ("host<TAB>domain" lines; '' without a
--       domain budget), then 4
--       values per link: url, depth, parent, digest ('' for native; '!' queues the link
--       without asking the filter, for a request that must be fetched again, Scrapy's
--       dont_filter: it is neither checked nor added, nor counted as seen).
--       Modes '3' and '4' are '1' and '2' for the seeds of a recurring run (every_run): each
--       seed is queued whatever the filter says (and added to it), and a tracked seed is
--       taken from its host's revisit set into its queue, due now (its validators kept).
-- Returns one code per link: 1 new and queued, 0 seen before, 2 refused: maxPages reached,
-- 3 refused: over the per-page budget of memory pressure (set_pressure.lua), 5 refused: its
-- host's budget (scope.maxQueuedPerHost: tasks queued now; scope.maxPagesPerHost: URLs ever
-- admitted) or its domain's (scope.maxQueuedPerDomain, scope.maxPagesPerDomain). Refused links are not added to the filter, so they can still be admitted later
-- (a host whose queue drained below its budget takes them when they are met again).
local backend = ARGV[3]
local seeding = ARGV[4] ~= '0'
local last_seeds = ARGV[4] == '1' or ARGV[4] == '3'
local every_run = ARGV[4] == '3' or ARGV[4] == '4'
local native_key = ARGV[5]
local FIRST = 7
local cfg = settings()
local now = now_ms()
local count = (#ARGV - FIRST + 1) / 4
local admitted = tonumber(redis.call('HGET', K.stats, 'admitted')) or 0
local limited = cfg.max_pages > 0
-- Per-host and per-domain budgets (0: none), the domains by the batch's map of hosts to
-- registrable domains (ARGV[6]); each key's counts read once per batch, then kept here.
local budgets = redis.call('HMGET', K.meta, 'max_queued_per_host', 'max_pages_per_host',
  'max_queued_per_domain', 'max_pages_per_domain')
local max_queued, max_admitted = tonumber(budgets[1]) or 0, tonumber(budgets[2]) or 0
local max_queued_d, max_admitted_d = tonumber(budgets[3]) or 0, tonumber(budgets[4]) or 0
local domain_of = {}
if ARGV[6] ~= '' and (max_queued_d > 0 or max_admitted_d > 0) then
  for host, domain in string.gmatch(ARGV[6], '([^\t\n]+)\t([^\n]+)') do domain_of[host] = domain end
end
local budgeted = max_queued > 0 or max_admitted > 0 or next(domain_of) ~= nil
local host_room, domain_room = {}, {}
-- The room a budget leaves one key (a host or a domain) of its counters: the fewer of what
-- maxQueued and maxAdmitted allow (math.huge without either).
local function room_in(counts, key, most_queued, most_admitted)
  local room = math.huge
  if most_queued > 0 then
    local queued = tonumber(redis.call('ZSCORE', counts.queued, key)) or 0
    room = math.min(room, most_queued - queued)
  end
  if most_admitted > 0 then
    local ever = tonumber(redis.call('ZSCORE', counts.admitted, key)) or 0
    room = math.min(room, most_admitted - ever)
  end
  return room
end
local function room_of(host)
  local room = host_room[host]
  if not room then
    room = room_in(HOST_COUNTS, host, max_queued, max_admitted)
    host_room[host] = room
  end
  local domain = domain_of[host]
  if not domain then return room end
  if not domain_room[domain] then
    domain_room[domain] = room_in(DOMAIN_COUNTS, domain, max_queued_d, max_admitted_d)
  end
  return math.min(room, domain_room[domain])
end
local function take_room(host)
  host_room[host] = host_room[host] - 1
  local domain = domain_of[host]
  if domain then domain_room[domain] = domain_room[domain] - 1 end
end
-- Under memory pressure each page (parent) may add at most `budget` new links. A parent's
-- mark after '#' (frontier/parents.py: a sitemap's lastmod per listed page) is not part of
-- the page: one sitemap shares one budget.
local budget = -1
if not seeding then budget = cfg.links_per_page end
local per_parent = {}
local filter = nil
if backend == 'bitmap' then filter = bloom_open() end

-- Unlimited native path: one BF.MADD for the batch.
local bulk = nil
if backend == 'native' and not limited and budget < 0 and not budgeted then
  local urls = {}
  for i = 0, count - 1 do urls[#urls + 1] = ARGV[FIRST + i * 4] end
  bulk = native_multi('BF.MADD', native_key, urls)
end

-- A seed of a recurring run that is tracked: queued now from its chunk (true), or already
-- queued or leased (true, nothing to do); false when it is not tracked.
local function promote_tracked_seed(url)
  if redis.call('HEXISTS', K.rv_states, url) == 1 then return true end
  return promote_at_rest(url, cfg, now)
end

-- New tasks grouped by host and depth, in the order they came.
local result, queues, hosts = {}, {}, {}
local new, dup, refused, over_budget, unfiltered, over_host = 0, 0, 0, 0, 0, 0
for i = 0, count - 1 do
  local base = FIRST + i * 4
  local url, parent = ARGV[base], ARGV[base + 2]
  local page = parent
  if budget >= 0 then page = string.match(parent, '^[^#]*') end
  local code
  if every_run and cfg.tracking and promote_tracked_seed(url) then
    code = 4
  elseif limited and admitted >= cfg.max_pages then
    code = 2
  elseif budget >= 0 and (per_parent[page] or 0) >= budget then
    code = 3
  elseif budgeted and room_of(host_of(url)) <= 0 then
    code = 5
  else
    local is_new
    if ARGV[base + 3] == '!' then
      is_new = true
      unfiltered = unfiltered + 1
    elseif bulk then
      is_new = bulk[i + 1] == 1
    elseif backend == 'native' then
      is_new = redis.call('BF.ADD', native_key, url) == 1
    else
      is_new = bloom_add(filter, ARGV[base + 3])
    end
    if every_run and not is_new then
      is_new = true
      unfiltered = unfiltered + 1
    end
    code = is_new and 1 or 0
  end
  if code == 1 then
    local host, depth = host_of(url), tonumber(ARGV[base + 1])
    local by_depth = queues[host]
    if not by_depth then
      by_depth = {}
      queues[host] = by_depth
      hosts[#hosts + 1] = host
    end
    local queue = by_depth[depth]
    if not queue then
      queue = {urls = {}, parents = {}}
      by_depth[depth] = queue
    end
    queue.urls[#queue.urls + 1] = url
    queue.parents[#queue.parents + 1] = parent
    admitted = admitted + 1
    new = new + 1
    per_parent[page] = (per_parent[page] or 0) + 1
    queue.admitted = (queue.admitted or 0) + 1
    if budgeted then take_room(host) end
  elseif code == 0 then
    dup = dup + 1
  elseif code == 4 then
    code = 1 -- queued (promote_tracked_seed counted it)
  elseif code == 2 then
    refused = refused + 1
  elseif code == 5 then
    over_host = over_host + 1
  else
    over_budget = over_budget + 1
  end
  result[i + 1] = code
end

for _, host in ipairs(hosts) do
  -- the host's domain before its counts move, so count_host counts them by domain too
  if domain_of[host] then redis.call('HSET', HOST_DOMAIN, host, domain_of[host]) end
  local st = load_host(host)
  local admitted_here = 0
  for depth, queue in pairs(queues[host]) do
    push_back(host, depth, queue.urls, queue.parents)
    note_depth(st, depth)
    admitted_here = admitted_here + (queue.admitted or 0)
  end
  count_host('admitted', host, admitted_here)
  settle_host(host, st, cfg, now)
end
if new > 0 then
  redis.call('HINCRBY', K.stats, 'queued', new)
  if new > unfiltered then redis.call('HINCRBY', K.stats, 'seen', new - unfiltered) end
  redis.call('HSET', K.stats, 'admitted', admitted)
end
if dup > 0 then redis.call('HINCRBY', K.stats, 'duplicates', dup) end
if refused > 0 then redis.call('HINCRBY', K.stats, 'over_limit', refused) end
if over_budget > 0 then redis.call('HINCRBY', K.stats, 'over_budget', over_budget) end
if over_host > 0 then redis.call('HINCRBY', K.stats, 'host_budget', over_host) end
if last_seeds then redis.call('HSETNX', K.meta, 'seeded_ms', now) end
return result
