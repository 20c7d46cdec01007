-- robots_store.lua: a worker is done fetching one origin's robots.txt: share its answer and give
-- up the origin's fetch lock in one step, so no worker sees the lock gone and the answer missing;
-- and keep the shared cache within its bounds, least recently used origins out first.
-- ARGV: [1] prefix, [2] epoch, [3] origin ("scheme://host[:port]"), [4] the lock token this
-- worker took ('' when it fetched without the lock), [5] the entry as JSON, stored whoever
-- holds the lock (a fresh answer is never thrown away), or '' to release the lock only (the
-- fetch was cut), [6] now in ms (the workers' clock, as the entries' own times are), [7] the
-- most origins the cache keeps, [8] the most bytes of entries it keeps.
-- K.robots_used scores each cached origin by its last use (stored here, read by a worker:
-- RobotsCache.read); K.stats "robots_bytes" is the entries' bytes, "robots_evictions" how many
-- were dropped. The origin just stored is never the one dropped.
-- Returns {1 when this worker's lock was released else 0, origins dropped now, origins cached,
-- bytes cached}.
settings()
local origin, token, entry = ARGV[3], ARGV[4], ARGV[5]
local max_origins, max_bytes = tonumber(ARGV[7]), tonumber(ARGV[8])
local evicted = 0
if entry ~= '' then
  local grown = #entry - redis.call('HSTRLEN', K.robots, origin)
  redis.call('HSET', K.robots, origin, entry)
  redis.call('ZADD', K.robots_used, ARGV[6], origin)
  local held = redis.call('HINCRBY', K.stats, 'robots_bytes', grown)
  local count = redis.call('ZCARD', K.robots_used)
  while count > max_origins or held > max_bytes do
    local oldest = redis.call('ZRANGE', K.robots_used, 0, 0)[1]
    if oldest == nil or oldest == origin then break end
    held = redis.call('HINCRBY', K.stats, 'robots_bytes', -redis.call('HSTRLEN', K.robots, oldest))
    redis.call('HDEL', K.robots, oldest)
    redis.call('ZREM', K.robots_used, oldest)
    count = count - 1
    evicted = evicted + 1
  end
  if evicted > 0 then redis.call('HINCRBY', K.stats, 'robots_evictions', evicted) end
end
local released = 0
local lock = robots_lock_key(origin)
if token ~= '' and redis.call('GET', lock) == token then
  redis.call('DEL', lock)
  released = 1
end
local held = tonumber(redis.call('HGET', K.stats, 'robots_bytes') or 0)
return {released, evicted, redis.call('ZCARD', K.robots_used), held}
