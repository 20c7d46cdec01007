-- release.lua: give leases back without counting an attempt (graceful shutdown).
-- ARGV: [1] prefix, [2] worker id, then lease ids.
-- The task returns to the front of its depth in its host queue.
-- Returns the server time (ms), then 1 (released) / 0 (not the owner's) per id.
local worker = ARGV[2]
local cfg = settings()
local now = now_ms()
local result, touched, released = {}, {}, 0
for i = 3, #ARGV do
  local task, host = take_lease(ARGV[i], worker)
  if task then
    local _, depth, url = split_task(task)
    push_task(task, depth, url, nil)
    touched[host] = true
    released = released + 1
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
for host in pairs(touched) do refresh_host(host, cfg, now) end
if released > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -released)
  redis.call('HINCRBY', K.stats, 'queued', released)
  redis.call('HINCRBY', K.stats, 'released', released)
end
table.insert(result, 1, now)
return result
