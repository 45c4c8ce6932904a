-- elector-sidecar's Redis fence (github.com/elector-sidecar/elector-sidecar/pkg/fencing/redis).
--
-- One atomic step at the resource: compare the caller's fencing token with the
-- highest token Redis has accepted and, only if it is not stale, record it,
-- write the value and append the write to a history stream. Load this text
-- with EVAL / EVALSHA (SCRIPT LOAD) from any language.
--
-- KEYS[1]  the token key, a hash: token (highest accepted, decimal), uid (the
--          Lease UID recorded with it, "" if unknown), version (counts
--          accepted writes). It must exist (create it once, at setup:
--          HSETNX KEYS[1] token 0); a missing token key is an error, never
--          "highest token 0".
-- KEYS[2]  the value key (a string), SET on every accepted write.
-- KEYS[3]  the history stream: one XADD per accepted write with the fields
--          token, uid (as recorded), writer, version.
--          In Redis Cluster give the three keys one hash tag: {billing}:token,
--          {billing}:value, {billing}:history.
-- ARGV[1]  the fencing token: a non-negative 64-bit decimal integer.
-- ARGV[2]  its Lease UID ("" if unknown: value-only rule).
-- ARGV[3]  the writer (holder identity), recorded in the history.
-- ARGV[4]  the value.
-- ARGV[5]  optional: the version the caller loaded; if given and the token key
--          has another version, nothing is written (compare-and-swap).
-- ARGV[6]  optional: trim the history to about this many entries (XADD
--          MAXLEN ~, so a few more may stay); absent or "" trims to about
--          10000 (the default: a history kept whole grows until a Redis with
--          noeviction refuses writes); "0" keeps every entry.
--
-- The rule (pkg/fencing CheckToken/Accept): a token lower than the stored one
-- is stale; an equal value is stale if both Lease UIDs are non-empty and
-- differ; a higher value is accepted whatever its UID. For an equal value an
-- empty UID never erases the stored one.
--
-- Reply: {token, uid, version, history entry ID} as recorded.
-- Error replies (the first word is the code):
--   STALE token=<t> stored=<s> uid=<stored uid, to the end of the line>
--   CONFLICT version=<stored> expected=<ARGV[5]>
--   MISSING <key>: ...        the token key does not exist
--   INVALID ...               bad keys or arguments
--   CORRUPT ...               the token key does not hold a valid token

local MAX = '9223372036854775807'

-- canonical decimal form of a non-negative int64, or nil
local function canon(s)
  if type(s) ~= 'string' or not string.match(s, '^%d+$') then
    return nil
  end
  s = string.gsub(s, '^0+', '')
  if s == '' then
    s = '0'
  end
  if #s > 19 or (#s == 19 and s > MAX) then
    return nil
  end
  return s
end

-- compares two canonical decimals exactly (no floating point)
local function cmp(a, b)
  if #a ~= #b then
    return #a < #b and -1 or 1
  end
  if a == b then
    return 0
  end
  return a < b and -1 or 1
end

local function fail(code, msg)
  return redis.error_reply(code .. ' ' .. msg)
end

if #KEYS ~= 3 then
  return fail('INVALID', 'want 3 keys (token, value, history), got ' .. #KEYS)
end
for i = 1, 3 do
  if KEYS[i] == '' then
    return fail('INVALID', 'key ' .. i .. ' is empty')
  end
end
if KEYS[1] == KEYS[2] or KEYS[1] == KEYS[3] or KEYS[2] == KEYS[3] then
  return fail('INVALID', 'the token, value and history keys must differ')
end
if #ARGV < 4 or #ARGV > 6 then
  return fail('INVALID', 'want 4 to 6 arguments (token, lease UID, writer, value[, version[, history limit]]), got ' .. #ARGV)
end

local token = canon(ARGV[1])
if not token then
  return fail('INVALID', 'token "' .. ARGV[1] .. '" is not a non-negative 64-bit integer')
end
local uid = ARGV[2]
if string.find(uid, '%c') then
  return fail('INVALID', 'lease UID contains a control character')
end
local expected = ARGV[5] or ''
if expected ~= '' then
  expected = canon(expected)
  if not expected then
    return fail('INVALID', 'version "' .. ARGV[5] .. '" is not a non-negative integer')
  end
end
local limit = ARGV[6] or ''
if limit == '' then
  limit = '10000'
else
  limit = canon(limit)
  if not limit then
    return fail('INVALID', 'history limit "' .. ARGV[6] .. '" is not a non-negative integer')
  end
end

-- Check every key's type before the first write: a Redis error after a
-- write would leave the write half done.
local types = {'hash', 'string', 'stream'}
for i = 1, 3 do
  local t = redis.call('TYPE', KEYS[i]).ok
  if t ~= 'none' and t ~= types[i] then
    return fail('INVALID', KEYS[i] .. ' holds a ' .. t .. ', not a ' .. types[i])
  end
end

local st = redis.call('HMGET', KEYS[1], 'token', 'uid', 'version')
if not st[1] then
  if redis.call('EXISTS', KEYS[1]) == 0 then
    return fail('MISSING', KEYS[1] .. ': the fence state does not exist (create it once, at setup: HSETNX ' ..
      KEYS[1] .. ' token 0; if it existed, Redis lost it and the highest token with it)')
  end
  return fail('CORRUPT', KEYS[1] .. ' has no token field')
end
local stored = canon(st[1])
if not stored then
  return fail('CORRUPT', KEYS[1] .. ' token "' .. st[1] .. '" is not a non-negative 64-bit integer')
end
local storedUID = st[2] or ''
local version = canon(st[3] or '0')
if not version then
  return fail('CORRUPT', KEYS[1] .. ' version "' .. st[3] .. '" is not a non-negative integer')
end

if expected ~= '' and expected ~= version then
  return fail('CONFLICT', 'version=' .. version .. ' expected=' .. expected)
end

local c = cmp(token, stored)
if c < 0 or (c == 0 and uid ~= '' and storedUID ~= '' and uid ~= storedUID) then
  return fail('STALE', 'token=' .. token .. ' stored=' .. stored .. ' uid=' .. storedUID)
end
if c == 0 and uid == '' then
  uid = storedUID
end

redis.call('HINCRBY', KEYS[1], 'version', 1)
version = redis.call('HGET', KEYS[1], 'version')
redis.call('HSET', KEYS[1], 'token', token, 'uid', uid)
redis.call('SET', KEYS[2], ARGV[4])
local id
if limit ~= '0' then
  id = redis.call('XADD', KEYS[3], 'MAXLEN', '~', limit, '*', 'token', token, 'uid', uid, 'writer', ARGV[3], 'version', version)
else
  id = redis.call('XADD', KEYS[3], '*', 'token', token, 'uid', uid, 'writer', ARGV[3], 'version', version)
end
return {token, uid, version, id}
