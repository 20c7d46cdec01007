-- set_host_delay.lua: a host's own delay between fetches (robots Crawl-delay), in ms. The
-- host's robots.txt was read (or given up), so a robots.txt wait recorded by defer_host.lua
-- is over.
-- ARGV: [1] prefix, [2] epoch, [3] host, [4] delay ms (negative: forget it, use the job's
--       delay).
local cfg = settings()
local st = load_host(ARGV[3])
st.delay = tonumber(ARGV[4])
if st.delay < 0 then st.delay = -1 end
settle_host(ARGV[3], st, cfg, now_ms())
clear_robots_wait(ARGV[3])
return 1
