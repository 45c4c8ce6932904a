-- The PostgreSQL fence of elector-sidecar (pkg/fencing/postgres). Idempotent:
-- run it once at setup, or as one of your migrations; running it again
-- changes nothing but the function's body.
--
--   elector_fence          one row per fenced resource: the highest accepted
--                          token, its Lease UID, the holder who wrote it, a value
--                          (used by the Go fencing.Store) and a version that
--                          counts the accepted fence checks.
--   elector_fence_history  one row per accepted fence check, written in the same
--                          transaction as the check (a rolled-back transaction
--                          leaves none). For one resource, id order is commit
--                          order: fence() holds the resource's row lock until
--                          the transaction ends, so nobody else can check (and
--                          take an id) in between. Tokens never go down in it.
--   fence(resource, token, lease_uid, holder)
--                          the check: raises the stored token to token, or
--                          raises SQLSTATE EF001 (stale) and changes nothing.

CREATE TABLE IF NOT EXISTS elector_fence (
    resource   text PRIMARY KEY CHECK (resource <> ''),
    token      bigint NOT NULL CHECK (token >= 0),
    lease_uid  text,
    holder     text,
    value      bytea,
    version    bigint NOT NULL DEFAULT 0 CHECK (version >= 0),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TABLE IF NOT EXISTS elector_fence_history (
    id           bigserial PRIMARY KEY,
    resource     text NOT NULL,
    token        bigint NOT NULL CHECK (token >= 0),
    lease_uid    text,
    holder       text,
    committed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX IF NOT EXISTS elector_fence_history_resource_id ON elector_fence_history (resource, id);

-- fence(resource, token, lease_uid, holder) is pkg/fencing's CheckToken rule,
-- in one INSERT ... ON CONFLICT DO UPDATE: the resource's row is locked (also
-- when the check fails) until the caller's transaction ends, so concurrent
-- checks of one resource run one after the other, each against the token the
-- one before it committed.
--
--   * a token lower than the stored one is stale;
--   * an equal token is stale if both Lease UIDs are known (not NULL, not '')
--     and differ: the same value was issued under two Leases;
--   * otherwise it is accepted: the row records token, lease_uid and holder
--     (an equal token without a UID keeps the stored UID), version + 1, and
--     one history row is written. A resource never checked counts as token 0.
--
-- Returns the accepted token. Errors (the caller's transaction is aborted):
--   EF001  stale token. MESSAGE names both tokens; DETAIL is machine-readable:
--          "token=<t> stored=<s> stored_lease_uid=<uid, empty if unknown>".
--   22023  invalid input: resource NULL or '', token NULL or negative.
CREATE OR REPLACE FUNCTION fence(resource text, token bigint, lease_uid text DEFAULT NULL, holder text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
AS $fence$
#variable_conflict use_column
DECLARE
    uid            text := NULLIF(fence.lease_uid, '');
    stored_token   bigint;
    stored_uid     text;
    msg            text;
BEGIN
    IF fence.resource IS NULL OR fence.resource = '' THEN
        RAISE EXCEPTION 'fence: invalid resource name: must not be empty'
            USING ERRCODE = '22023';
    END IF;
    IF fence.token IS NULL OR fence.token < 0 THEN
        RAISE EXCEPTION 'fence: invalid fencing token % for resource %: must be a non-negative integer',
            coalesce(fence.token::text, 'NULL'), quote_literal(fence.resource)
            USING ERRCODE = '22023';
    END IF;

    INSERT INTO elector_fence AS f (resource, token, lease_uid, holder, version, updated_at)
    VALUES (fence.resource, fence.token, uid, NULLIF(fence.holder, ''), 1, clock_timestamp())
    ON CONFLICT (resource) DO UPDATE
        SET token      = EXCLUDED.token,
            lease_uid  = CASE WHEN EXCLUDED.token = f.token AND EXCLUDED.lease_uid IS NULL
                              THEN f.lease_uid ELSE EXCLUDED.lease_uid END,
            holder     = EXCLUDED.holder,
            version    = f.version + 1,
            updated_at = EXCLUDED.updated_at
        WHERE f.token < EXCLUDED.token
           OR (f.token = EXCLUDED.token
               AND (f.lease_uid IS NULL OR EXCLUDED.lease_uid IS NULL OR f.lease_uid = EXCLUDED.lease_uid))
    RETURNING f.token, f.lease_uid INTO stored_token, stored_uid;

    IF NOT FOUND THEN
        -- Stale. The row is locked by this transaction now, so this reads the
        -- token the check failed against.
        SELECT f.token, f.lease_uid INTO stored_token, stored_uid
          FROM elector_fence AS f WHERE f.resource = fence.resource;
        msg := format('stale fencing token %s for resource %s: the resource already accepted token %s',
                      fence.token, quote_literal(fence.resource), stored_token);
        IF stored_token = fence.token THEN
            msg := msg || format(' under lease UID %s, this token is from lease UID %s', stored_uid, uid);
        END IF;
        RAISE EXCEPTION USING
            ERRCODE = 'EF001',
            MESSAGE = msg,
            DETAIL = format('token=%s stored=%s stored_lease_uid=%s', fence.token, stored_token, coalesce(stored_uid, '')),
            HINT = 'A newer leader has written: this writer is stale and must stop.';
    END IF;

    INSERT INTO elector_fence_history (resource, token, lease_uid, holder)
    VALUES (fence.resource, stored_token, stored_uid, NULLIF(fence.holder, ''));
    RETURN stored_token;
END
$fence$;
