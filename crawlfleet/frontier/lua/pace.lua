-- pace.lua: take a host's next fetch slot for a request made outside claim (a redirect hop
-- or a request-layer retry), so every request to a host stays hostDelaySeconds apart.
-- ARGV: [1] prefix, [2] epoch, [3] host.
-- Returns 0 when the slot was taken (its last fetch is now), else the ms left to wait.
local cfg = settings()
local now = now_ms()
local host = ARGV[3]
local st = load_host(host)
local delay = effective_delay(st, cfg)
if st.last >= 0 and st.last + delay > now then return st.last + delay - now end
if delay <= 0 then return 0 end
st.last = now
save_host(host, st)
if redis.call('ZSCORE', K.ready, host) then place_host(host, st, cfg, now) end
return 0
