-- stead's own table, beside DBOS's (never one of DBOS's): the roster of stead executors that
-- used this schema. Liveness is each executor's advisory lock (lock_key1, lock_key2), not a
-- column; last_seen (epoch ms, the server's clock) only guards adoption (ARCHITECTURE.md, Fleet).
CREATE TABLE IF NOT EXISTS {s}.stead_executors (
    executor_id text PRIMARY KEY,
    host text NOT NULL,
    pid bigint NOT NULL,
    application_name text,
    application_version text NOT NULL,
    lock_key1 integer NOT NULL,
    lock_key2 integer NOT NULL,
    lease_ms bigint NOT NULL,
    started_at bigint NOT NULL,
    last_seen bigint NOT NULL
);
