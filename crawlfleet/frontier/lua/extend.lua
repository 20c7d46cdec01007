-- extend.lua: heartbeat long fetches: push the expiry of leases the worker still owns.
-- ARGV: [1] prefix, [2] epoch, [3] worker id, [4] ttl ms (0: the job's lease ttl), then
--       lease tokens.
-- Returns {expires_ms, code per id: 1 extended / 0 not the owner's}.
local worker = ARGV[3]
local ttl = tonumber(ARGV[4])
local cfg = settings()
if ttl <= 0 then ttl = cfg.lease_ttl_ms end
local expires = now_ms() + ttl
local out = {expires}
for i = 5, #ARGV do
  local holder = split_lease(ARGV[i])
  local member = ARGV[i]
  if holder == worker and not redis.call('ZSCORE', K.leases, member) then
    member = FETCHED .. member
  end
  if holder == worker and redis.call('ZSCORE', K.leases, member) then
    redis.call('ZADD', K.leases, 'XX', expires, member)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
