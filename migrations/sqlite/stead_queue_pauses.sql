-- stead's own table, beside DBOS's (never one of DBOS's): the paused queues. A row here makes
-- the claim on that queue allow nothing (`sysdb::pauses`); enqueues still land and running
-- workflows finish. Deleting the row resumes the queue. paused_at: epoch ms.
CREATE TABLE IF NOT EXISTS stead_queue_pauses (
    queue_name TEXT PRIMARY KEY,
    paused_at INTEGER NOT NULL
);
