-- The PostgreSQL fence of elector-sidecar (pkg/fencing/postgres). Idempotent:
-- run it once at setup, or as one of your migrations; running it again
-- changes nothing but the functions' bodies (your settings are kept).
--
--   elector_fence           one row per fenced resource: the highest accepted
--                           token, its Lease UID, the holder who raised it to
--                           that token, a value and a version (both used by the
--                           Go fencing.Store).
--   elector_fence_history   one row per accepted check, written in the same
--                           transaction as the check (a rolled-back transaction
--                           leaves none), kept to about history_keep rows per
--                           resource. For one resource, tokens never go down
--                           in id order, and a row that raised the token comes
--                           after (and has a committed_at not before) every
--                           row with a lower token.
--   elector_fence_settings  one row: history (write history rows at all,
--                           default true) and history_keep (rows kept per
--                           resource, default 10000; 0 keeps every row; one
--                           check in 1024 prunes, so a resource has up to
--                           about history_keep + 1023 rows).
--   elector_fence(resource, token, lease_uid, holder)
--                           the check: accepts token (raising the stored one
--                           if it is higher), or raises SQLSTATE EF001 (stale)
--                           and changes nothing.

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

CREATE TABLE IF NOT EXISTS elector_fence_settings (
    one_row      boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    history      boolean NOT NULL DEFAULT true,
    history_keep bigint NOT NULL DEFAULT 10000 CHECK (history_keep >= 0)
);
INSERT INTO elector_fence_settings DEFAULT VALUES ON CONFLICT DO NOTHING;

-- elector_fence_stale raises the stale-token error of elector_fence().
CREATE OR REPLACE FUNCTION elector_fence_stale(resource text, token bigint, lease_uid text, stored_token bigint, stored_uid text)
RETURNS void
LANGUAGE plpgsql
AS $stale$
DECLARE
    msg text := format('stale fencing token %s for resource %s: the resource already accepted token %s',
                       token, quote_literal(resource), stored_token);
BEGIN
    IF stored_token = token THEN
        msg := msg || format(' under lease UID %s, this token is from lease UID %s', stored_uid, lease_uid);
    END IF;
    RAISE EXCEPTION USING
        ERRCODE = 'EF001',
        MESSAGE = msg,
        DETAIL = format('token=%s stored=%s stored_lease_uid=%s', token, stored_token, coalesce(stored_uid, '')),
        HINT = 'A newer leader has written: this writer is stale and must stop.';
END
$stale$;

-- elector_fence(resource, token, lease_uid, holder) is pkg/fencing's
-- CheckToken rule:
--
--   * a token lower than the stored one is stale;
--   * an equal token is stale if both Lease UIDs are known (not NULL, not '')
--     and differ: the same value was issued under two Leases;
--   * otherwise it is accepted. A higher token is recorded (token, lease_uid,
--     holder); an equal token records its UID if none was stored, and
--     otherwise writes nothing to elector_fence. One history row is written
--     (unless elector_fence_settings.history is false). A resource never
--     checked counts as token 0.
--
-- Locking: a transactional advisory lock per resource (class 1162626371, the
-- resource's hashtext), held until the caller's transaction ends. A check of
-- the stored token takes it shared, so writers holding the current token run
-- in parallel; a check that writes elector_fence (a raise, a first check, a
-- UID to record) takes it exclusive, so it waits for every open transaction
-- that checked the old token, and a check that comes after it queues behind
-- it and then finds the raised token. Under REPEATABLE READ and SERIALIZABLE
-- a row changed after the transaction's snapshot is a serialization failure
-- (40001): run the transaction again.
--
-- Returns the accepted token. Errors (the caller's transaction is aborted):
--   EF001  stale token. MESSAGE names both tokens; DETAIL is machine-readable:
--          "token=<t> stored=<s> stored_lease_uid=<uid, empty if unknown>".
--   22023  invalid input: resource NULL or '', token NULL or negative.
CREATE OR REPLACE FUNCTION elector_fence(resource text, token bigint, lease_uid text DEFAULT NULL, holder text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
AS $fence$
#variable_conflict use_column
DECLARE
    uid          text := NULLIF(elector_fence.lease_uid, '');
    lock_key     integer;
    stored_token bigint;
    stored_uid   text;
    write_it     boolean;
    shared       boolean;
    keep         bigint;
    new_id       bigint;
    cutoff       bigint;
BEGIN
    IF elector_fence.resource IS NULL OR elector_fence.resource = '' THEN
        RAISE EXCEPTION 'elector_fence: invalid resource name: must not be empty'
            USING ERRCODE = '22023';
    END IF;
    IF elector_fence.token IS NULL OR elector_fence.token < 0 THEN
        RAISE EXCEPTION 'elector_fence: invalid fencing token % for resource %: must be a non-negative integer',
            coalesce(elector_fence.token::text, 'NULL'), quote_literal(elector_fence.resource)
            USING ERRCODE = '22023';
    END IF;
    lock_key := hashtext(elector_fence.resource);

    -- What is stored now, read without a lock, picks the lock: tokens only go
    -- up, and a stored UID only goes from unknown to known at one token. The
    -- current token with nothing to record takes the lock shared with its
    -- other writers, in the same statement (after its snapshot: the read
    -- under the lock, below, is what counts).
    SELECT f.token, f.lease_uid,
           CASE WHEN f.token = elector_fence.token AND (uid IS NULL OR f.lease_uid = uid)
                THEN pg_advisory_xact_lock_shared(1162626371, lock_key) IS NOT NULL END
      INTO stored_token, stored_uid, shared
      FROM elector_fence AS f WHERE f.resource = elector_fence.resource;
    IF shared THEN
        -- The read under the lock also reads the settings (one statement
        -- less on the common path).
        IF current_setting('transaction_isolation') IN ('repeatable read', 'serializable') THEN
            -- FOR SHARE fails (40001) if the row changed after the snapshot.
            SELECT f.token, f.lease_uid, coalesce(s.history, true), coalesce(s.history_keep, 10000)
              INTO stored_token, stored_uid, write_it, keep
              FROM elector_fence AS f LEFT JOIN elector_fence_settings AS s ON true
             WHERE f.resource = elector_fence.resource FOR SHARE OF f;
        ELSE
            SELECT f.token, f.lease_uid, coalesce(s.history, true), coalesce(s.history_keep, 10000)
              INTO stored_token, stored_uid, write_it, keep
              FROM elector_fence AS f LEFT JOIN elector_fence_settings AS s ON true
             WHERE f.resource = elector_fence.resource;
        END IF;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'elector_fence: the row of resource % was deleted during the check', quote_literal(elector_fence.resource)
                USING ERRCODE = '40001';
        END IF;
        IF stored_token <> elector_fence.token THEN -- raised before this check got the lock
            PERFORM elector_fence_stale(elector_fence.resource, elector_fence.token, uid, stored_token, stored_uid);
        END IF;
    ELSIF FOUND AND (stored_token > elector_fence.token
                     OR (stored_token = elector_fence.token AND uid IS NOT NULL AND stored_uid IS NOT NULL AND stored_uid <> uid)) THEN
        -- Stale now, stale for ever.
        PERFORM elector_fence_stale(elector_fence.resource, elector_fence.token, uid, stored_token, stored_uid);
    ELSE
        -- A raise, a first check or a UID to record: exclusive.
        PERFORM pg_advisory_xact_lock(1162626371, lock_key);
        INSERT INTO elector_fence AS f (resource, token, lease_uid, holder, updated_at)
        VALUES (elector_fence.resource, elector_fence.token, uid, NULLIF(elector_fence.holder, ''), clock_timestamp())
        ON CONFLICT (resource) DO UPDATE
            SET token      = EXCLUDED.token,
                lease_uid  = CASE WHEN EXCLUDED.token = f.token AND EXCLUDED.lease_uid IS NULL
                                  THEN f.lease_uid ELSE EXCLUDED.lease_uid END,
                holder     = EXCLUDED.holder,
                updated_at = EXCLUDED.updated_at
            WHERE f.token < EXCLUDED.token
               OR (f.token = EXCLUDED.token
                   AND (f.lease_uid IS NULL OR EXCLUDED.lease_uid IS NULL OR f.lease_uid = EXCLUDED.lease_uid))
        RETURNING f.token, f.lease_uid INTO stored_token, stored_uid;
        IF NOT FOUND THEN
            -- Raised by another check while this one waited for the lock.
            SELECT f.token, f.lease_uid INTO stored_token, stored_uid
              FROM elector_fence AS f WHERE f.resource = elector_fence.resource;
            PERFORM elector_fence_stale(elector_fence.resource, elector_fence.token, uid, stored_token, stored_uid);
        END IF;
    END IF;

    IF write_it IS NULL THEN -- not read with the token
        SELECT s.history, s.history_keep INTO write_it, keep FROM elector_fence_settings AS s;
        IF NOT FOUND THEN
            write_it := true;
            keep := 10000;
        END IF;
    END IF;
    IF write_it THEN
        INSERT INTO elector_fence_history (resource, token, lease_uid, holder)
        VALUES (elector_fence.resource, stored_token, stored_uid, NULLIF(elector_fence.holder, ''))
        RETURNING id INTO new_id;
        -- Pruning: one check in 1024 (by history id) drops the resource's
        -- rows older than its newest history_keep; rare, so that its cost
        -- stays out of the checks' p99, and one at a time per resource (the
        -- try-lock: another pruner of the resource is at it already).
        IF keep > 0 AND new_id % 1024 = 0 AND pg_try_advisory_xact_lock(1162626372, lock_key) THEN
            SELECT h.id INTO cutoff FROM elector_fence_history AS h
             WHERE h.resource = elector_fence.resource AND h.id <= new_id
             ORDER BY h.id DESC OFFSET keep LIMIT 1;
            IF FOUND THEN
                DELETE FROM elector_fence_history AS h
                 WHERE h.resource = elector_fence.resource AND h.id <= cutoff;
            END IF;
        END IF;
    END IF;
    RETURN stored_token;
END
$fence$;

-- Up to this version the check was called fence(), a name that collides
-- with anyone's. If fence(text, bigint, text, text) on the search path is
-- ours (its body names elector_fence), it becomes a deprecated wrapper of
-- elector_fence() for callers not yet moved to the new name (it also counts
-- the version, as the old Store expects). Any other fence() is left alone.
-- Drop ours once nothing calls it: DROP FUNCTION fence(text, bigint, text, text);
DO $upgrade$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc AS p
                WHERE p.oid = to_regprocedure('fence(text, bigint, text, text)')
                  AND p.prosrc LIKE '%elector_fence%') THEN
        EXECUTE $wrapper$
CREATE OR REPLACE FUNCTION fence(resource text, token bigint, lease_uid text DEFAULT NULL, holder text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
AS $body$
-- elector-sidecar: the old name of elector_fence(), deprecated.
DECLARE
    accepted bigint;
BEGIN
    accepted := elector_fence($1, $2, $3, $4);
    UPDATE elector_fence AS f SET version = f.version + 1 WHERE f.resource = $1;
    RETURN accepted;
END
$body$
$wrapper$;
    END IF;
END
$upgrade$;
