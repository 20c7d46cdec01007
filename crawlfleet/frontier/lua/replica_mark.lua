-- replica_mark.lua: one write for a WAIT to wait for. WAIT waits only for the last write of
-- its own connection; sent on the connection that sends WAIT next (one pipeline), this makes
-- that WAIT cover every write the node made before it, whichever connection made them.
-- KEYS: [1] the frontier's meta key, [2] its replica mark (keys.REPLICA_MARK); one slot.
-- ARGV: none.
-- Returns 1, or 0 when the meta key is gone: nothing is written then, so a frontier lost
-- with its node gets no stray key (and the caller's next script says FrontierLost).
-- Neither lib.lua nor a shebang: on Redis 6 and 7 alike an unflagged script is checked
-- against maxmemory at its first write, and only if that write may grow memory, so the DEL
-- first lets the SET pass on a full Redis (a wait stands before an ack, and acks free memory).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[2], '1')
return 1
