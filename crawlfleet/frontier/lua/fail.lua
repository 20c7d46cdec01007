-- fail.lua: record failed attempts of leases the worker still owns.
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] worker id, [4] count of revisits, then 6 values per
--       revisit (as ack.lua's), then 5 values per lease:
--       lease token, retryable '1'|'0', retry delay ms, failure class, message.
-- A final failure of a tracked URL schedules it again instead (revisit_failed; answered 1),
-- except a revisit whose change is "gone": dead-lettered, and its state forgotten.
-- A retryable failure under taskAttempts goes to the delayed set (or straight back to its
-- host queue when the delay is 0); anything else goes to the dead-letter hash with its class
-- and message. A failure of a pushback class (PUSHBACK in lib.lua) starts or extends the job's
-- pushback run (K.meta pushback_since_ms, pushback_last_ms). Returns the server time (ms), then per lease: 0 not the owner's,
-- 1 will be retried, 2 dead.
local cfg = settings()
local now = now_ms()
local revisits, first = read_revisits(4)
local tokens = {}
for i = first, #ARGV, 5 do tokens[#tokens + 1] = ARGV[i] end
local taken, per_host = take_leases(tokens, ARGV[3])
local result, back = {now}, {}
local failed, dead, delayed, queued, pushed = 0, 0, 0, 0, 0
for i = 1, #tokens do
  local lease = taken[i]
  if lease then
    local a = first + (i - 1) * 5
    failed = failed + 1
    local keep = nil
    if cfg.tracking or revisits[i] then
      keep = function(url, depth) return revisit_failed(url, depth, revisits[i], now, cfg) end
    end
    if PUSHBACK[ARGV[a + 3]] then pushed = pushed + 1 end
    local fate = retry_or_bury(lease.task, ARGV[a + 3], ARGV[a + 4], tonumber(ARGV[a + 2]),
      ARGV[a + 1] == '1', cfg, now, false, keep)
    if fate == 'kept' then
      result[#result + 1] = 1
    elseif fate == 'dead' then
      dead = dead + 1
      result[#result + 1] = 2
    else
      if fate == 'delayed' then
        delayed = delayed + 1
      else
        queued = queued + 1
        back[lease.host] = true
      end
      result[#result + 1] = 1
    end
  else
    result[#result + 1] = 0
  end
end
release_slots(per_host, cfg, now, back)
if failed > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -failed)
  redis.call('HINCRBY', K.stats, 'failed', failed)
  if dead > 0 then redis.call('HINCRBY', K.stats, 'dead', dead) end
  if delayed > 0 then redis.call('HINCRBY', K.stats, 'delayed', delayed) end
  if queued > 0 then redis.call('HINCRBY', K.stats, 'queued', queued) end
end
if pushed > 0 then
  -- The sites push back (429, 403, a soft block): since when, unbroken by a page acked
  -- (ack.lua ends it), and the last time; the steering loop's spec.autoPause reads both.
  redis.call('HSETNX', K.meta, 'pushback_since_ms', now)
  redis.call('HSET', K.meta, 'pushback_last_ms', now)
end
return result, failed > 0
