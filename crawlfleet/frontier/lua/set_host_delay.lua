-- set_host_delay.lua: a host's own delay between fetches (robots Crawl-delay), in ms.
-- ARGV: [1] prefix, [2] host, [3] delay ms (negative: forget it, use the job's delay).
local cfg = settings()
local st = load_host(ARGV[2])
st.delay = tonumber(ARGV[3])
if st.delay < 0 then st.delay = -1 end
settle_host(ARGV[2], st, cfg, now_ms())
return 1
