-- stead's own table, beside DBOS's (never one of DBOS's): the paused workflows. A row here stops
-- the workflow before its next durable call and keeps the claim from taking it
-- (`sysdb::pauses`); its `workflow_status` row keeps DBOS's status. Deleting the row resumes it;
-- deleting the workflow deletes its pause. paused_at: epoch ms.
CREATE TABLE IF NOT EXISTS stead_workflow_pauses (
    workflow_uuid TEXT PRIMARY KEY
        REFERENCES workflow_status (workflow_uuid) ON UPDATE CASCADE ON DELETE CASCADE,
    paused_at INTEGER NOT NULL
);
