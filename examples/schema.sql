-- The examples' own table (examples/go-worker creates the same with -setup).
-- Run once, after pkg/fencing/postgres/migration.sql:
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f pkg/fencing/postgres/migration.sql -f examples/schema.sql
CREATE TABLE IF NOT EXISTS example_writes (
    id         bigserial PRIMARY KEY,
    resource   text NOT NULL,
    token      bigint NOT NULL,
    holder     text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
