-- release.lua: give leases back without counting an attempt (graceful shutdown).
-- Applied once per call id (once() in lib.lua): the body returns its reply and whether it changed state.
-- ARGV: [1] prefix, [2] epoch, [3] worker id, then lease tokens.
-- The task returns to the front of its depth in its host's queue.
-- Returns the server time (ms), then 1 (released) / 0 (not the owner's) per id.
local cfg = settings()
local now = now_ms()
local tokens = {}
for i = 4, #ARGV do tokens[#tokens + 1] = ARGV[i] end
local taken, per_host = take_leases(tokens, ARGV[3])
local result, released, back = {now}, 0, {}
for i = 1, #tokens do
  local lease = taken[i]
  if lease then
    local host, depth = push_front(lease.task)
    local st = load_host(host)
    note_depth(st, depth)
    save_host(host, st)
    back[host] = true
    released = released + 1
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
end
release_slots(per_host, cfg, now, back)
if released > 0 then
  redis.call('HINCRBY', K.stats, 'leased', -released)
  redis.call('HINCRBY', K.stats, 'queued', released)
  redis.call('HINCRBY', K.stats, 'released', released)
end
return result, released > 0
