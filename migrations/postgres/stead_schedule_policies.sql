-- stead's own table, beside DBOS's (never one of DBOS's): a schedule's firing policy, which
-- `workflow_schedules` has no column for. No row: DBOS's behaviour (allow overlap, no jitter).
-- overlap_policy: allow_all, skip, buffer_one or cancel_other; jitter_ms: firings are delayed
-- by a deterministic amount in [0, jitter_ms).
CREATE TABLE IF NOT EXISTS {s}.stead_schedule_policies (
    schedule_name text PRIMARY KEY,
    overlap_policy text NOT NULL,
    jitter_ms bigint NOT NULL
);
