-- guarded.lua: one command on one small key of the job, only while the job's epoch holds, so
-- a lost frontier gets no stray key (the output ledger, the closing files' claim and mark).
-- ARGV: [1] prefix, [2] epoch, [3] command, [4] the key's name under the prefix, then the
--       command's other arguments.
-- Returns the command's reply. allow-oom: its callers write a few small values that pages
-- wait on before their acks, and an ack is what frees memory.
settings()
return redis.call(ARGV[3], PREFIX .. ARGV[4], unpack(ARGV, 5))
