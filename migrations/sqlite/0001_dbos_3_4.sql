-- The DBOS Transact 3.4 system database, SQLite flavour (dbos_migrations = 125), as DBOS's own
-- migrations leave it: same tables, columns (in order), defaults and indexes. Tables are
-- unqualified: a SQLite file holds one system database.

CREATE TABLE application_versions (
    version_id TEXT NOT NULL PRIMARY KEY,
    version_name TEXT NOT NULL UNIQUE,
    version_timestamp INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000),
    created_at INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000)
, "application_name" TEXT DEFAULT NULL);

CREATE TABLE notifications (
    message_uuid TEXT NOT NULL DEFAULT (hex(randomblob(16))) PRIMARY KEY,
    destination_uuid TEXT NOT NULL,
    topic TEXT,
    message TEXT NOT NULL,
    created_at_epoch_ms INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000), "serialization" TEXT DEFAULT NULL, "consumed" BOOLEAN NOT NULL DEFAULT FALSE, consumed_by_function_id INTEGER,
    FOREIGN KEY (destination_uuid) REFERENCES workflow_status(workflow_uuid) 
        ON UPDATE CASCADE ON DELETE CASCADE
);

CREATE TABLE "operation_outputs" (
    workflow_uuid TEXT NOT NULL,
    function_id INTEGER NOT NULL,
    function_name TEXT NOT NULL DEFAULT '',
    output TEXT,
    error TEXT,
    child_workflow_id TEXT,
    started_at_epoch_ms INTEGER,
    completed_at_epoch_ms INTEGER,
    serialization TEXT,
    application_name TEXT DEFAULT NULL,
    retention_timestamp INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000),
    PRIMARY KEY (workflow_uuid, function_id)
);

CREATE TABLE queues (
    queue_id TEXT PRIMARY KEY DEFAULT (hex(randomblob(16))),
    name TEXT NOT NULL UNIQUE,
    concurrency INTEGER,
    worker_concurrency INTEGER,
    rate_limit_max INTEGER,
    rate_limit_period_sec REAL,
    priority_enabled BOOLEAN NOT NULL DEFAULT FALSE,
    partition_queue BOOLEAN NOT NULL DEFAULT FALSE,
    polling_interval_sec REAL NOT NULL DEFAULT 1.0,
    created_at INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000),
    updated_at INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000)
, "application_name" TEXT DEFAULT NULL, "partition_concurrency" INTEGER DEFAULT NULL, "partition_worker_concurrency" INTEGER DEFAULT NULL, "partition_rate_limit_max" INTEGER DEFAULT NULL, "partition_rate_limit_period_sec" REAL DEFAULT NULL);

CREATE TABLE streams (
    workflow_uuid TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    "offset" INTEGER NOT NULL, function_id INTEGER NOT NULL DEFAULT 0, "serialization" TEXT DEFAULT NULL,
    PRIMARY KEY (workflow_uuid, key, "offset"),
    FOREIGN KEY (workflow_uuid) REFERENCES workflow_status(workflow_uuid) 
        ON UPDATE CASCADE ON DELETE CASCADE
);

CREATE TABLE workflow_events (
    workflow_uuid TEXT NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL, "serialization" TEXT DEFAULT NULL,
    PRIMARY KEY (workflow_uuid, key),
    FOREIGN KEY (workflow_uuid) REFERENCES workflow_status(workflow_uuid) 
        ON UPDATE CASCADE ON DELETE CASCADE
);

CREATE TABLE workflow_events_history (
    workflow_uuid TEXT NOT NULL,
    function_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    value TEXT NOT NULL, "serialization" TEXT DEFAULT NULL,
    PRIMARY KEY (workflow_uuid, function_id, key),
    FOREIGN KEY (workflow_uuid) REFERENCES workflow_status(workflow_uuid)
        ON UPDATE CASCADE ON DELETE CASCADE
);

CREATE TABLE workflow_input (
    workflow_uuid TEXT NOT NULL PRIMARY KEY,
    inputs TEXT,
    retention_timestamp INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000)
);

CREATE TABLE workflow_output (
    workflow_uuid TEXT NOT NULL PRIMARY KEY,
    output TEXT,
    error TEXT,
    retention_timestamp INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000)
);

CREATE TABLE workflow_schedules (
    schedule_id TEXT PRIMARY KEY,
    schedule_name TEXT NOT NULL UNIQUE,
    workflow_name TEXT NOT NULL,
    workflow_class_name TEXT,
    schedule TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'ACTIVE',
    context TEXT NOT NULL
, "last_fired_at" TEXT DEFAULT NULL, "automatic_backfill" BOOLEAN NOT NULL DEFAULT FALSE, "cron_timezone" TEXT DEFAULT NULL, "queue_name" TEXT DEFAULT NULL, "application_name" TEXT DEFAULT NULL);

CREATE TABLE workflow_status (
    workflow_uuid TEXT PRIMARY KEY,
    status TEXT,
    name TEXT,
    authenticated_user TEXT,
    assumed_role TEXT,
    authenticated_roles TEXT,
    request TEXT,
    output TEXT,
    error TEXT,
    executor_id TEXT,
    created_at INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000),
    updated_at INTEGER NOT NULL DEFAULT (strftime('%s','now') * 1000),
    application_version TEXT,
    application_id TEXT,
    class_name TEXT DEFAULT NULL,
    config_name TEXT DEFAULT NULL,
    recovery_attempts INTEGER DEFAULT 0,
    queue_name TEXT,
    workflow_timeout_ms INTEGER,
    workflow_deadline_epoch_ms INTEGER,
    inputs TEXT,
    started_at_epoch_ms INTEGER,
    deduplication_id TEXT,
    priority INTEGER NOT NULL DEFAULT 0
, queue_partition_key TEXT, forked_from TEXT, "owner_xid" TEXT DEFAULT NULL, "parent_workflow_id" TEXT DEFAULT NULL, "serialization" TEXT DEFAULT NULL, "delay_until_epoch_ms" BIGINT DEFAULT NULL, "was_forked_from" BOOLEAN NOT NULL DEFAULT FALSE, "rate_limited" BOOLEAN NOT NULL DEFAULT FALSE, "completed_at" BIGINT, "attributes" TEXT, "schedule_name" TEXT, "debounce_deadline_epoch_ms" BIGINT DEFAULT NULL, "is_debounced" BOOLEAN NOT NULL DEFAULT FALSE, "application_name" TEXT DEFAULT NULL, "creator_xid" TEXT DEFAULT NULL);

CREATE INDEX "idx_application_versions_owner_timestamp" ON "application_versions" ("application_name", "version_timestamp" DESC);

CREATE INDEX "idx_application_versions_timestamp" ON "application_versions" ("version_timestamp" DESC);

CREATE INDEX "idx_operation_outputs_completed_at_function_name_v2" ON "operation_outputs" ("completed_at_epoch_ms", "function_name", "application_name");

CREATE INDEX idx_operation_outputs_retention
    ON operation_outputs (retention_timestamp);

CREATE INDEX idx_workflow_input_retention
    ON workflow_input (retention_timestamp);

CREATE INDEX idx_workflow_output_retention
    ON workflow_output (retention_timestamp);

CREATE INDEX "idx_workflow_status_completed_at" ON "workflow_status" ("completed_at") WHERE "completed_at" IS NOT NULL;

CREATE INDEX "idx_workflow_status_deadline" ON "workflow_status" ("workflow_deadline_epoch_ms") WHERE "status" IN ('ENQUEUED', 'PENDING', 'DELAYED') AND "workflow_deadline_epoch_ms" IS NOT NULL;

CREATE INDEX "idx_workflow_status_delayed" ON "workflow_status" ("delay_until_epoch_ms") WHERE status = 'DELAYED';

CREATE INDEX "idx_workflow_status_failed" ON "workflow_status" ("status", "created_at") WHERE "status" IN ('ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED');

CREATE INDEX "idx_workflow_status_forked_from" ON "workflow_status" ("forked_from") WHERE "forked_from" IS NOT NULL;

CREATE INDEX "idx_workflow_status_in_flight_v2" ON "workflow_status" ("queue_name", "status", "priority", "created_at", "application_name") WHERE "status" IN ('ENQUEUED', 'PENDING');

CREATE INDEX "idx_workflow_status_parent_workflow_id" ON "workflow_status" ("parent_workflow_id") WHERE "parent_workflow_id" IS NOT NULL;

CREATE INDEX "idx_workflow_status_partition_dequeue_v3" ON "workflow_status" ("queue_name", "status", "queue_partition_key", "priority", "created_at", "workflow_uuid", "application_name") WHERE "status" IN ('ENQUEUED', 'PENDING') AND "queue_partition_key" IS NOT NULL;

CREATE INDEX "idx_workflow_status_pending" ON "workflow_status" ("created_at") WHERE "status" = 'PENDING';

CREATE INDEX "idx_workflow_status_rate_limited" ON "workflow_status" ("queue_name", "started_at_epoch_ms") WHERE "rate_limited" = TRUE;

CREATE INDEX "idx_workflow_status_schedule_name" ON "workflow_status" ("schedule_name") WHERE "schedule_name" IS NOT NULL;

CREATE INDEX "idx_workflow_status_started_at" ON "workflow_status" ("started_at_epoch_ms") WHERE "started_at_epoch_ms" IS NOT NULL;

CREATE INDEX idx_workflow_topic ON notifications (destination_uuid, topic);

CREATE UNIQUE INDEX "uq_application_versions_owner_version"
    ON application_versions ("application_name", "version_name")
    WHERE "application_name" IS NOT NULL;

CREATE UNIQUE INDEX "uq_application_versions_unclaimed_version"
    ON application_versions ("version_name")
    WHERE "application_name" IS NULL;

CREATE UNIQUE INDEX "uq_workflow_status_dedup_id" ON "workflow_status" ("queue_name", "deduplication_id") WHERE "deduplication_id" IS NOT NULL;

CREATE INDEX workflow_status_created_at_index ON workflow_status (created_at);
