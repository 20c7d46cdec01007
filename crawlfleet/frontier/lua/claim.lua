-- claim.lua: lease up to n URLs to a worker from hosts whose next allowed time has come.
-- ARGV: [1] prefix, [2] worker id, [3] n.
-- Returns {now_ms, expires_ms, id1, task1, id2, task2, ...}.
-- Politeness: a host gives at most perHost - inFlight URLs, and only one when it has a delay
-- between fetches (hostDelaySeconds or its robots Crawl-delay); its next allowed time moves
-- by that delay. Due delayed retries are moved to their host queues first.
local worker, n = ARGV[2], tonumber(ARGV[3])
local cfg = settings()
local now = now_ms()
local expires = now + cfg.lease_ttl_ms

-- 1. Promote due retries (bounded per call; the rest are promoted by the next claims).
local due = redis.call('ZRANGEBYSCORE', K.delayed, '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  local seq = redis.call('HINCRBY', K.stats, 'seq', #due) - #due
  local promoted_hosts = {}
  for i, task in ipairs(due) do
    redis.call('ZREM', K.delayed, task)
    local _, depth, url = split_task(task)
    push_task(task, depth, url, seq + i)
    promoted_hosts[host_of(url)] = true
  end
  for host in pairs(promoted_hosts) do refresh_host(host, cfg, now) end
  redis.call('HINCRBY', K.stats, 'delayed', -#due)
  redis.call('HINCRBY', K.stats, 'queued', #due)
end

-- 2. Lease from ready hosts, earliest-ready first.
local out = {now, expires}
local remaining = n
local taken = 0
local owned = owned_key(worker)
if remaining > 0 then
  local hosts = redis.call('ZRANGEBYSCORE', K.ready, '-inf', now, 'LIMIT', 0, remaining)
  for _, host in ipairs(hosts) do
    if remaining <= 0 then break end
    local inflight = tonumber(redis.call('HGET', K.inflight, host)) or 0
    local delay = host_delay(host, cfg)
    local room = cfg.per_host - inflight
    if delay > 0 and room > 1 then room = 1 end
    if room > remaining then room = remaining end
    local q = qkey(host)
    local popped = {}
    if room > 0 then popped = redis.call('ZPOPMIN', q, room) end
    local got = #popped / 2
    local first_id = 0
    if got > 0 then first_id = redis.call('HINCRBY', K.stats, 'lease_seq', got) - got end
    for i = 1, #popped, 2 do
      local task = popped[i]
      local id = tostring(first_id + (i + 1) / 2)
      redis.call('HSET', K.leasedata, id, worker .. '\t' .. task)
      redis.call('ZADD', K.leases, expires, id)
      redis.call('SADD', owned, id)
      out[#out + 1] = id
      out[#out + 1] = task
    end
    inflight = inflight + got
    if got > 0 then
      redis.call('HSET', K.inflight, host, inflight)
      redis.call('HSET', K.hostlast, host, now)
    end
    remaining = remaining - got
    taken = taken + got
    if inflight >= cfg.per_host or redis.call('EXISTS', q) == 0 then
      redis.call('ZREM', K.ready, host)
    else
      redis.call('ZADD', K.ready, now + delay, host)
    end
  end
end
if taken > 0 then
  redis.call('HINCRBY', K.stats, 'queued', -taken)
  redis.call('HINCRBY', K.stats, 'leased', taken)
end
return out
