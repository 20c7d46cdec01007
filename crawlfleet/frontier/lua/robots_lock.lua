-- robots_lock.lua: take one origin's robots.txt fetch lock (SET NX PX) for this worker.
-- ARGV: [1] prefix, [2] epoch, [3] origin ("scheme://host[:port]"), [4] a random token,
--       [5] the lock's ttl in ms.
-- Returns 1 when this worker holds the lock now, 0 when another one does. A script only so
-- that a lost frontier takes no lock (settings() raises first).
settings()
if redis.call('SET', robots_lock_key(ARGV[3]), ARGV[4], 'NX', 'PX', ARGV[5]) then return 1 end
return 0
