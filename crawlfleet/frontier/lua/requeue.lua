-- requeue.lua: return leases whose holder is gone: expired ones, or all of one owner's.
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] mode 'expired'|'owner', [4] owner id (mode owner) or
--       limit (expired).
-- Each requeue counts an attempt (a page that kills its worker must not kill the fleet
-- forever); past taskAttempts the URL is dead-lettered with class lease_expired/worker_lost.
-- A lease still fetching (not marked fetched) keeps its host slot counted until its fetch
-- deadline (hold_slot): the dead worker's request may still be running at the site.
-- Owner mode reads every lease (ZRANGE): in-flight leases are few (workers x perWorker).
-- Returns {requeued, dead, server time ms}.
local cfg = settings()
local now = now_ms()
local ids, fclass, message = {}, nil, nil
if ARGV[3] == 'owner' then
  for _, token in ipairs(redis.call('ZRANGE', K.leases, 0, -1)) do
    if split_lease(token) == ARGV[4] then ids[#ids + 1] = token end
  end
  fclass, message = 'worker_lost', 'worker ' .. ARGV[4] .. ' stopped while holding the lease'
else
  ids = redis.call('ZRANGEBYSCORE', K.leases, '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
  fclass, message = 'lease_expired', 'lease expired without ack'
end
local taken, per_host = take_leases(ids, false, now)
local requeued, dead, back = 0, 0, {}
for i = 1, #ids do
  if taken[i] then
    if retry_or_bury(taken[i].task, fclass, message, 0, true, cfg, now) == 'dead' then
      dead = dead + 1
    else
      requeued = requeued + 1
      back[taken[i].host] = true
    end
  end
end
release_slots(per_host, cfg, now, back)
if requeued + dead > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -(requeued + dead))
  redis.call('HINCRBY', K.stats, 'requeued', requeued)
  redis.call('HINCRBY', K.stats, 'queued', requeued)
  if dead > 0 then redis.call('HINCRBY', K.stats, 'dead', dead) end
end
return {requeued, dead, now}, requeued + dead > 0
