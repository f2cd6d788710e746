-- stead's own table, beside DBOS's (never one of DBOS's): continue-as-new chains
-- (`sysdb::continuations`). Run from_id continued as run to_id, the generation-th run after
-- the chain's first, root_id. Rows go with either workflow. created_at: epoch ms.
CREATE TABLE IF NOT EXISTS stead_continuations (
    from_id TEXT PRIMARY KEY
        REFERENCES workflow_status (workflow_uuid) ON UPDATE CASCADE ON DELETE CASCADE,
    to_id TEXT NOT NULL UNIQUE
        REFERENCES workflow_status (workflow_uuid) ON UPDATE CASCADE ON DELETE CASCADE,
    root_id TEXT NOT NULL,
    generation INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
