-- set_host_delay.lua: a host's own delay between fetches (robots Crawl-delay), in ms.
-- ARGV: [1] prefix, [2] host, [3] delay ms (negative: forget it, use the job's delay).
local cfg = settings()
if tonumber(ARGV[3]) < 0 then
  redis.call('HDEL', K.hostdelay, ARGV[2])
else
  redis.call('HSET', K.hostdelay, ARGV[2], ARGV[3])
end
refresh_host(ARGV[2], cfg, now_ms())
return 1
