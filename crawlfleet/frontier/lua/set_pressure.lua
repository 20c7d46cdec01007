-- set_pressure.lua: the fleet's memory backpressure, enforced by claim.lua and enqueue.lua.
-- ARGV: [1] prefix, [2] epoch, [3] level (0 none, 1 high, 2 critical), [4] new links admitted
--       per page (-1: no budget), [5] claims per second for the whole job (0: no limit).
-- Runs past maxmemory (it is how the fleet slows a full Redis down); overwrites three fields.
settings()
redis.call('HSET', K.meta, 'pressure_level', ARGV[3], 'pressure_links_per_page', ARGV[4],
  'pressure_claims_per_s', ARGV[5])
return 1
