-- crawlguard fleet sync: one batch of bucket consumption, applied atomically (one script per
-- batch), with the Redis server's clock. Loaded by src/fleet.rs, run with EVALSHA.
--
-- KEYS[1]        the replicas sorted set (member: replica id, score: the ms deadline until
--                which it counts as alive, now + ARGV[2])
-- KEYS[1 + i]    bucket i: "<tat seconds>:<tat nanoseconds>", a GCRA theoretical arrival time
-- ARGV[1]        the replica id
-- ARGV[2]        how long it counts as alive, ms (contract: alive_ms(interval_ms), three of
--                its intervals, at most ARGV[3])
-- ARGV[3]        the most any replica counts as alive, ms (contract: MAX_ALIVE_MS); a member
--                alive for longer (written before interval_ms was bounded) is dropped
-- ARGV[4]        deadline, Redis time in ms (0: none): past it the sidecar has given up on
--                this script (a stalled Redis runs queued scripts when it resumes), so it
--                changes no bucket (the heartbeat still counts); the filter sends a batch
--                once, so this is what keeps a stall from charging its use late, all at once
-- ARGV[3i + 2 .. 3i + 4] (i = 1..n)  bucket i's emission interval ns (round(1e9 / rate_per_s),
--                1 ..= MAX_AHEAD), burst, tokens used since the last sync
--
-- Returns {replicas, now_ms, available_1, full_in_ns_1, ..., available_n, full_in_ns_n}, or
-- {-1, now_ms} past the deadline.
--
-- Per bucket: ahead = max(tat - now, 0) + used x emission (no upper bound but MAX_AHEAD: a
-- bucket may go into debt); available = burst - ceil(ahead / emission), clamped to
-- 0..=burst (the same as floor((now + burst x emission - tat) / emission)); full_in_ns =
-- ahead. A bucket written here expires when it is full again (PX = ceil(ahead / 1 ms), at
-- least 1 ms), so Redis holds active buckets only. A bucket with used 0 is only read.
--
-- Lua numbers are doubles: a nanosecond timestamp (~1.8e18) does not fit their 53 bits, so
-- the TAT is stored as seconds and nanoseconds and every figure is computed relative to now,
-- where it stays an exact integer below MAX_AHEAD (2^53 - 7.2e12 ns, about 104 days).

local MAX_AHEAD = 9000000000000000
local NS = 1000000000

local t = redis.call('TIME')
local now_s = tonumber(t[1])
local now_ns = tonumber(t[2]) * 1000
local now_ms = now_s * 1000 + math.floor(now_ns / 1000000)

-- Heartbeat: this replica is alive for three of its intervals; expired members go, and so
-- do members alive beyond the cap, whatever wrote them (a made-up interval of 4294967295
-- ms once kept one for 149 days). The set expires with its last member.
local cap = math.max(tonumber(ARGV[3]) or 1, 1)
local window = math.min(math.max(tonumber(ARGV[2]) or 0, 1), cap)
redis.call('ZADD', KEYS[1], string.format('%.0f', now_ms + window), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. string.format('%.0f', now_ms))
redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. string.format('%.0f', now_ms + cap), '+inf')
local replicas = redis.call('ZCARD', KEYS[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
local last_ms = tonumber(last[2]) or (now_ms + window)
redis.call('PEXPIRE', KEYS[1], string.format('%.0f', math.max(last_ms - now_ms, 1)))

-- Past the deadline only the heartbeat counts (the replica was alive when it sent this):
-- without it a stall would empty the replica set, and the next answers would give every
-- replica too large a share of each limit.
local deadline_ms = tonumber(ARGV[4]) or 0
if deadline_ms > 0 and now_ms > deadline_ms then
  return {-1, now_ms}
end

-- floor(a / b) for integers a >= 0, b >= 1, exact where a / b rounds across an integer.
local function div_floor(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local out = {replicas, now_ms}
for i = 2, #KEYS do
  local a = 3 * (i - 1) + 2
  local emission = tonumber(ARGV[a])
  local burst = tonumber(ARGV[a + 1])
  local used = tonumber(ARGV[a + 2])

  -- pcall: a foreign key of another type must not stop the script half way (Redis does
  -- not undo the writes before an error); it counts as no state and SET replaces it.
  local ahead = 0
  local stored = redis.pcall('GET', KEYS[i])
  if type(stored) == 'string' then
    local s, n = string.match(stored, '^(%d+):(%d+)$')
    if s then
      ahead = (tonumber(s) - now_s) * NS + (tonumber(n) - now_ns)
    end
  end
  if ahead < 0 then
    ahead = 0
  end

  if used > 0 then
    ahead = math.min(ahead + used * emission, MAX_AHEAD)
    local tat_ns = now_ns + ahead
    local carry = div_floor(tat_ns, NS)
    redis.call('SET', KEYS[i],
      string.format('%.0f:%.0f', now_s + carry, tat_ns - carry * NS),
      'PX', string.format('%.0f', math.max(math.ceil(ahead / 1000000), 1)))
  end

  local available = burst
  if ahead > 0 then
    local q = div_floor(ahead, emission)
    if q * emission < ahead then
      q = q + 1
    end
    available = math.max(burst - q, 0)
  end
  out[#out + 1] = available
  out[#out + 1] = ahead
end
return out
