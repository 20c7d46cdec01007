-- claim.lua: lease up to n URLs to a worker from hosts whose next allowed time has come.
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] worker id, [4] n, then tokens of the worker's leases whose
-- responses have arrived since its last claim: their host slots are freed first (see
-- mark_fetched).
-- Returns {now_ms, expires_ms, token1, token2, ...}; a token is
-- "<number>\t<worker>\t@<fetch deadline ms>\t<task>" (the deadline: now + the fetch budget).
-- Politeness: a host gives at most perHost - inFlight URLs, and only one when it has a delay
-- between fetches (hostDelaySeconds or its robots Crawl-delay); its next allowed time moves
-- by that delay. Due delayed retries are moved to their host queues first, and the slots of
-- dead workers' leases whose fetch deadline has passed are given back (release_held); due
-- revisits of tracked URLs are promoted into their host queues (promote_revisits).
-- Memory pressure (set_pressure.lua) may cap claims per second for the whole job: a token
-- bucket in K.stats holding at most one second of claims, written only when URLs are taken.
local worker, n = ARGV[3], tonumber(ARGV[4])
local cfg = settings()
local now = now_ms()
local expires = now + cfg.lease_ttl_ms
local stamp = '\t' .. worker .. '\t@' .. (now + cfg.fetch_budget_ms) .. '\t'

-- 0. Free the host slots of leases the worker has finished fetching.
if #ARGV > 4 then
  local fetched = {}
  for i = 5, #ARGV do fetched[#fetched + 1] = ARGV[i] end
  release_slots(mark_fetched(fetched, worker), cfg, now)
end
release_held(cfg, now)

local tokens = nil
if cfg.claims_per_s > 0 then
  local bucket = redis.call('HMGET', K.stats, 'claim_tokens', 'claim_tokens_ms')
  local last = tonumber(bucket[2]) or now
  tokens = math.min(cfg.claims_per_s,
    (tonumber(bucket[1]) or cfg.claims_per_s) + (now - last) * cfg.claims_per_s / 1000)
  if math.floor(tokens) < n then n = math.floor(tokens) end
end

-- 1. Promote due retries (bounded per call; the rest are promoted by the next claims).
local due = redis.call('ZRANGEBYSCORE', K.delayed, '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  -- Removing first: on a Redis without script flags (6.x), a script's first write decides
  -- whether Redis past maxmemory lets it run, and a removal is always let through.
  chunked('ZREM', K.delayed, due)
  local promoted = {}
  for _, task in ipairs(due) do promoted[requeue_task(task)] = true end
  for host in pairs(promoted) do place_host(host, load_host(host), cfg, now) end
  redis.call('HINCRBY', K.stats, 'delayed', -#due)
  redis.call('HINCRBY', K.stats, 'queued', #due)
end

-- 1b. Promote due revisits the same way (a job without recrawl rules reads no revisit key).
if cfg.tracking then promote_revisits(cfg, now, 1000) end

-- 2. Lease from ready hosts, earliest-ready first.
local out = {now, expires}
local remaining = n
local expiries = {}
if n <= 0 then return out, false end
local hosts = redis.call('ZRANGEBYSCORE', K.ready, '-inf', now, 'LIMIT', 0, n)
if #hosts == 0 then return out, false end -- an idle poll writes nothing
local next_id = nil -- lease ids are reserved at the first URL popped
for _, host in ipairs(hosts) do
  if remaining <= 0 then break end
  local st = load_host(host)
  local room = cfg.per_host - st.inflight
  if effective_delay(st, cfg) > 0 and room > 1 then room = 1 end
  if room > remaining then room = remaining end
  local popped = {}
  if room > 0 then popped = pop_tasks(host, st, room) end
  if #popped > 0 and not next_id then
    next_id = redis.call('HINCRBY', K.stats, 'lease_seq', n) - n
  end
  for _, task in ipairs(popped) do
    next_id = next_id + 1
    local token = next_id .. stamp .. task
    expiries[#expiries + 1] = expires
    expiries[#expiries + 1] = token
    out[#out + 1] = token
  end
  local got = #popped
  remaining = remaining - got
  if got > 0 then
    st.inflight = st.inflight + got
    st.last = now
  end
  if got > 0 or room > 0 then
    settle_host(host, st, cfg, now) -- a host whose queue ran dry leaves the index
  else
    place_host(host, st, cfg, now)
  end
end
if #expiries > 0 then
  chunked('ZADD', K.leases, expiries)
  local taken = #expiries / 2
  redis.call('HINCRBY', K.stats, 'queued', -taken)
  redis.call('HINCRBY', K.stats, 'leased', taken)
  if tokens then redis.call('HSET', K.stats, 'claim_tokens', tokens - taken, 'claim_tokens_ms', now) end
end
return out, #expiries > 0
