-- claim_content.lua: record a stored file in the content index unless its bytes are stored
-- already (dedup by content: the first stored copy wins, across runs).
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] sha256 (hex), [4] the key the file is stored under.
-- Returns '' when this key is the stored copy now, else the key of the copy stored before.
settings()
if redis.call('HSETNX', FILES.content, ARGV[3], ARGV[4]) == 1 then return '', true end
return redis.call('HGET', FILES.content, ARGV[3]), false
