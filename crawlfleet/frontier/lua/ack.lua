-- ack.lua: complete leases the worker still owns (fencing: anyone else's ack is refused).
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] worker id, [4] count of revisits, then 6 values per
-- revisit (read_revisits in lib.lua: the lease's index among the tokens, interval ms, change,
-- lag ms, validators, ms since its fetch), then lease tokens.
-- A lease with a revisit is scheduled again an interval after its fetch with its validators; a tracked
-- URL without one is forgotten (settle_revisit).
-- Returns the server time (ms) it applied at, then per id 1 (acked) or 0 (not the owner's
-- any more: expired, requeued or reassigned).
local cfg = settings()
local now = now_ms()
local revisits, first = read_revisits(4)
local tokens = {}
for i = first, #ARGV do tokens[#tokens + 1] = ARGV[i] end
local taken, per_host = take_leases(tokens, ARGV[3])
release_slots(per_host, cfg, now)
local result, done, crawled = {now}, 0, {}
for i = 1, #tokens do
  local lease = taken[i]
  if lease then
    done = done + 1
    crawled[lease.host] = (crawled[lease.host] or 0) + 1
    result[#result + 1] = 1
    if cfg.tracking or revisits[i] then
      local _, depth, url = split_task(lease.task)
      settle_revisit(url, depth, revisits[i], now, cfg)
    end
  else
    result[#result + 1] = 0
  end
end
for host, count in pairs(crawled) do count_host('crawled', host, count) end
if done > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -done)
  redis.call('HINCRBY', K.stats, 'crawled', done)
  -- a page came through: whatever pushback there was, it is not total (spec.autoPause)
  redis.call('HDEL', K.meta, 'pushback_since_ms')
end
return result, done > 0
