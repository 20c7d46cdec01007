-- defer_host.lua: hold a host until its robots.txt is asked again (RFC 9309: a robots.txt
-- that cannot be read means "wait"), and record the wait, with the file's last status, for
-- the fleet to say what it waits for. set_host_delay.lua forgets the wait again (the host
-- allowed, or its robots.txt given up).
-- ARGV: [1] prefix, [2] epoch, [3] host, [4] wait ms (the host's delay until then),
--       [5] the robots.txt's last HTTP status ('503'; '' when no answer came).
-- Returns the host's next try (server time, ms).
local cfg = settings()
local now = now_ms()
local host, status = ARGV[3], ARGV[5]
local st = load_host(host)
st.delay = math.max(0, tonumber(ARGV[4]))
settle_host(host, st, cfg, now)
clear_robots_wait(host)
local next_try = next_allowed(st, cfg, now)
redis.call('ZADD', K.robots_waits, next_try, host .. '\t' .. status)
redis.call('HSET', K.robots_wait_status, host, status)
return next_try
