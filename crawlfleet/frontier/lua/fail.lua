-- fail.lua: record failed attempts of leases the worker still owns.
-- ARGV: [1] prefix, [2] worker id, then 5 values per lease:
--       id, retryable '1'|'0', retry delay ms, failure class, message.
-- A retryable failure under taskAttempts goes to the delayed set (or straight back to its
-- host queue when the delay is 0); anything else goes to the dead-letter hash with its class
-- and message. Returns the server time (ms), then per lease: 0 not the owner's,
-- 1 will be retried, 2 dead.
local worker = ARGV[2]
local cfg = settings()
local now = now_ms()
local result, touched = {}, {}
local failed, dead, delayed, queued = 0, 0, 0, 0
for i = 3, #ARGV, 5 do
  local task, host = take_lease(ARGV[i], worker)
  if task then
    touched[host] = true
    failed = failed + 1
    local fate = retry_or_bury(task, ARGV[i + 3], ARGV[i + 4], tonumber(ARGV[i + 2]),
      ARGV[i + 1] == '1', cfg, now)
    if fate == 'dead' then
      dead = dead + 1
      result[#result + 1] = 2
    else
      if fate == 'delayed' then delayed = delayed + 1 else queued = queued + 1 end
      result[#result + 1] = 1
    end
  else
    result[#result + 1] = 0
  end
end
for host in pairs(touched) do refresh_host(host, cfg, now) end
if failed > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -failed)
  redis.call('HINCRBY', K.stats, 'failed', failed)
  if dead > 0 then redis.call('HINCRBY', K.stats, 'dead', dead) end
  if delayed > 0 then redis.call('HINCRBY', K.stats, 'delayed', delayed) end
  if queued > 0 then redis.call('HINCRBY', K.stats, 'queued', queued) end
end
table.insert(result, 1, now)
return result
