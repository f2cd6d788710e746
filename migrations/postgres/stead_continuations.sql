-- stead's own table, beside DBOS's (never one of DBOS's): continue-as-new chains
-- (`sysdb::continuations`). Run from_id continued as run to_id, the generation-th run after
-- the chain's first, root_id. Rows go with either workflow. created_at: epoch ms.
CREATE TABLE IF NOT EXISTS {s}.stead_continuations (
    from_id text PRIMARY KEY
        REFERENCES {s}.workflow_status (workflow_uuid) ON UPDATE CASCADE ON DELETE CASCADE,
    to_id text NOT NULL UNIQUE
        REFERENCES {s}.workflow_status (workflow_uuid) ON UPDATE CASCADE ON DELETE CASCADE,
    root_id text NOT NULL,
    generation bigint NOT NULL,
    created_at bigint NOT NULL
);
