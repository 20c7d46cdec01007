-- count_files.lua: add to this run's file counters (stored, duplicates, bytes, resumed,
-- restarts, resumed_bytes; frontier.py names them), one call per batch.
-- Applied once per call id (once() in lib.lua): a retried batch is not counted twice.
-- ARGV: [1] prefix, [2] epoch, then counter, increment pairs (increments are whole numbers).
-- Returns 1.
settings()
for i = 3, #ARGV - 1, 2 do redis.call('HINCRBY', FILES.counts, ARGV[i], ARGV[i + 1]) end
return 1, #ARGV > 2
