-- robots_store.lua: a worker is done fetching one origin's robots.txt: share its answer and give
-- up the origin's fetch lock in one step, so no worker sees the lock gone and the answer missing.
-- ARGV: [1] prefix, [2] epoch, [3] origin ("scheme://host[:port]"), [4] the lock token this
-- worker took ('' when it fetched without the lock), [5] the entry as JSON, stored whoever
-- holds the lock (a fresh answer is never thrown away), or '' to release the lock only (the
-- fetch was cut).
-- Returns 1 when this worker's lock was released, 0 when it held none (expired, or another's).
settings()
local origin, token, entry = ARGV[3], ARGV[4], ARGV[5]
if entry ~= '' then redis.call('HSET', K.robots, origin, entry) end
local lock = robots_lock_key(origin)
if token ~= '' and redis.call('GET', lock) == token then
  redis.call('DEL', lock)
  return 1
end
return 0
