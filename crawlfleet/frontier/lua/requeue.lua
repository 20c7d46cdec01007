-- requeue.lua: return leases whose holder is gone: expired ones, or all of one owner's.
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] mode 'expired'|'owner', [4] owner id (mode owner) or
--       limit (expired), [5] (mode owner) '1' when the owner's process is known to have
--       ended ('0' or absent: it may still run).
-- Each requeue counts an attempt (a page that kills its worker must not kill the fleet
-- forever); past taskAttempts the URL is dead-lettered with class lease_expired/worker_lost.
-- A lease still fetching (not marked fetched) of a holder that may still run (an expired
-- lease, a worker that stopped heartbeating) keeps its host slot counted until its fetch
-- deadline (hold_slot): that worker's request may still be on the wire. An owner known to have
-- ended (its process exited, its pod is gone) has no connection left: its slots come back at
-- once, so the requeued URLs are claimable in the same moment (the per-host in-flight counts
-- equal the leases that exist), and its URLs go back to the front of their host's queue, so
-- the crawl resumes where that worker stopped (a lease that expired goes to the back); its
-- file download slots (files.perHost) are freed with them.
-- Owner mode reads every lease (ZRANGE): in-flight leases are few (workers x perWorker).
-- A tracked URL past taskAttempts is scheduled again with its kept state instead (never
-- lost; counted in revisit_failures and returned as rescheduled).
-- Returns {requeued, dead, server time ms, rescheduled}.
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
local ended = ARGV[3] == 'owner' and ARGV[5] == '1'
local hold_at = now
if ended then hold_at = nil end
local taken, per_host = take_leases(ids, false, hold_at)
local requeued, dead, kept, back = 0, 0, 0, {}
local keep = nil
if cfg.tracking then
  keep = function(url, depth) return revisit_failed(url, depth, nil, now, cfg) end
end
for i = 1, #ids do
  if taken[i] then
    -- An ended owner's download is not on the wire either: its file slot (held by the plain
    -- token; a download's lease is in the fetched form) comes back now, not when it expires
    -- (lease.ttlSeconds later), so the requeued file resumes at once.
    if ended then
      local plain = ids[i]
      if string.sub(plain, 1, 1) == FETCHED then plain = string.sub(plain, 2) end
      redis.call('ZREM', file_slots_key(taken[i].host), plain)
    end
    local fate = retry_or_bury(taken[i].task, fclass, message, 0, true, cfg, now, ended, keep)
    if fate == 'dead' then
      dead = dead + 1
    elseif fate == 'kept' then
      kept = kept + 1
    else
      requeued = requeued + 1
      back[taken[i].host] = true
    end
  end
end
release_slots(per_host, cfg, now, back)
if requeued + dead + kept > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -(requeued + dead + kept))
  redis.call('HINCRBY', K.stats, 'requeued', requeued)
  redis.call('HINCRBY', K.stats, 'queued', requeued)
  if dead > 0 then redis.call('HINCRBY', K.stats, 'dead', dead) end
end
return {requeued, dead, now, kept}, requeued + dead + kept > 0
