-- ack.lua: complete leases the worker still owns (fencing: anyone else's ack is refused).
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] worker id, then lease tokens.
-- Returns the server time (ms) it applied at, then per id 1 (acked) or 0 (not the owner's
-- any more: expired, requeued or reassigned).
local cfg = settings()
local now = now_ms()
local tokens = {}
for i = 4, #ARGV do tokens[#tokens + 1] = ARGV[i] end
local taken, per_host = take_leases(tokens, ARGV[3])
release_slots(per_host, cfg, now)
local result, done = {now}, 0
for i = 1, #tokens do
  if taken[i] then
    done = done + 1
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
if done > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -done)
  redis.call('HINCRBY', K.stats, 'crawled', done)
end
return result, done > 0
