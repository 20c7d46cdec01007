-- ack.lua: complete leases the worker still owns (fencing: anyone else's ack is refused).
-- ARGV: [1] prefix, [2] worker id, then lease ids.
-- Returns the server time (ms) it applied at, then per id 1 (acked) or 0 (not the owner's
-- any more: expired, requeued or reassigned).
local worker = ARGV[2]
local cfg = settings()
local now = now_ms()
local result, touched, done = {}, {}, 0
for i = 3, #ARGV do
  local task, host = take_lease(ARGV[i], worker)
  if task then
    touched[host] = true
    done = done + 1
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
for host in pairs(touched) do refresh_host(host, cfg, now) end
if done > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -done)
  redis.call('HINCRBY', K.stats, 'crawled', done)
end
table.insert(result, 1, now)
return result
