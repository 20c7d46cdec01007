-- requeue.lua: return leases whose holder is gone: expired ones, or all of one owner's.
-- ARGV: [1] prefix, [2] mode 'expired'|'owner', [3] owner id (mode owner) or limit (expired).
-- Each requeue counts an attempt (a page that kills its worker must not kill the fleet
-- forever); past taskAttempts the URL is dead-lettered with class lease_expired/worker_lost.
-- Returns {requeued, dead}.
local cfg = settings()
local now = now_ms()
local ids, fclass, message
if ARGV[2] == 'owner' then
  ids = redis.call('SMEMBERS', owned_key(ARGV[3]))
  fclass, message = 'worker_lost', 'worker ' .. ARGV[3] .. ' stopped while holding the lease'
else
  ids = redis.call('ZRANGEBYSCORE', K.leases, '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
  fclass, message = 'lease_expired', 'lease expired without ack'
end
local touched = {}
local requeued, dead = 0, 0
for _, id in ipairs(ids) do
  local task, host = take_lease(id, false)
  if task then
    touched[host] = true
    if retry_or_bury(task, fclass, message, 0, true, cfg, now) == 'dead' then
      dead = dead + 1
    else
      requeued = requeued + 1
    end
  end
end
if ARGV[2] == 'owner' then redis.call('DEL', owned_key(ARGV[3])) end
for host in pairs(touched) do refresh_host(host, cfg, now) end
if requeued + dead > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -(requeued + dead))
  redis.call('HINCRBY', K.stats, 'requeued', requeued)
  redis.call('HINCRBY', K.stats, 'queued', requeued)
  if dead > 0 then redis.call('HINCRBY', K.stats, 'dead', dead) end
end
return {requeued, dead}
