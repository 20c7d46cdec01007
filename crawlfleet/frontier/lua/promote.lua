-- promote.lua: move due revisits of tracked URLs into their host queues (claims do it too;
-- the fleet's tick calls this so due URLs show as queued and wake a fleet scaled to zero).
-- ARGV: [1] prefix, [2] epoch, [3] limit.
-- Returns how many URLs were promoted.
local cfg = settings()
if not cfg.tracking then return 0 end
return promote_revisits(cfg, now_ms(), tonumber(ARGV[3]))
