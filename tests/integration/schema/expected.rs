//! The DBOS 3.4 schema as facts, written out by hand from `dbos migrate` (PyPI dbos 3.4.0)
//! and its pg_dump, in the form catalog queries print them. `<s>.` stands for the schema.
//!
//! Each `*_rows` function gives what the matching query in `layout.rs` must return.

/// DBOS's default for epoch-millisecond columns, as Postgres prints it.
const NOW_MS: &str = "((EXTRACT(epoch FROM now()) * 1000.0))::bigint";

/// Every column of the schema in DBOS's order: (table, column, type, nullable, default).
#[rustfmt::skip]
const COLUMNS: &[(&str, &str, &str, bool, Option<&str>)] = &[
    ("application_versions", "version_id", "text", false, None),
    ("application_versions", "version_name", "text", false, None),
    ("application_versions", "version_timestamp", "bigint", false, Some(NOW_MS)),
    ("application_versions", "created_at", "bigint", false, Some(NOW_MS)),
    ("application_versions", "application_name", "text", true, None),
    ("dbos_migrations", "version", "bigint", false, None),
    ("event_dispatch_kv", "service_name", "text", false, None),
    ("event_dispatch_kv", "workflow_fn_name", "text", false, None),
    ("event_dispatch_kv", "key", "text", false, None),
    ("event_dispatch_kv", "value", "text", true, None),
    ("event_dispatch_kv", "update_seq", "numeric(38,0)", true, None),
    ("event_dispatch_kv", "update_time", "numeric(38,15)", true, None),
    ("notifications", "message_uuid", "text", false, Some("gen_random_uuid()")),
    ("notifications", "destination_uuid", "text", false, None),
    ("notifications", "topic", "text", true, None),
    ("notifications", "message", "text", false, None),
    ("notifications", "created_at_epoch_ms", "bigint", false, Some(NOW_MS)),
    ("notifications", "serialization", "text", true, None),
    ("notifications", "consumed", "boolean", false, Some("false")),
    ("notifications", "consumed_by_function_id", "integer", true, None),
    ("operation_outputs", "workflow_uuid", "text", false, None),
    ("operation_outputs", "function_id", "integer", false, None),
    ("operation_outputs", "function_name", "text", false, Some("''::text")),
    ("operation_outputs", "output", "text", true, None),
    ("operation_outputs", "error", "text", true, None),
    ("operation_outputs", "child_workflow_id", "text", true, None),
    ("operation_outputs", "started_at_epoch_ms", "bigint", true, None),
    ("operation_outputs", "completed_at_epoch_ms", "bigint", true, None),
    ("operation_outputs", "serialization", "text", true, None),
    ("operation_outputs", "application_name", "text", true, None),
    ("operation_outputs", "retention_timestamp", "bigint", false, Some(NOW_MS)),
    ("queues", "queue_id", "text", false, Some("(gen_random_uuid())::text")),
    ("queues", "name", "text", false, None),
    ("queues", "concurrency", "integer", true, None),
    ("queues", "worker_concurrency", "integer", true, None),
    ("queues", "rate_limit_max", "integer", true, None),
    ("queues", "rate_limit_period_sec", "double precision", true, None),
    ("queues", "priority_enabled", "boolean", false, Some("false")),
    ("queues", "partition_queue", "boolean", false, Some("false")),
    ("queues", "polling_interval_sec", "double precision", false, Some("1.0")),
    ("queues", "created_at", "bigint", false, Some(NOW_MS)),
    ("queues", "updated_at", "bigint", false, Some(NOW_MS)),
    ("queues", "application_name", "text", true, None),
    ("queues", "partition_concurrency", "integer", true, None),
    ("queues", "partition_worker_concurrency", "integer", true, None),
    ("queues", "partition_rate_limit_max", "integer", true, None),
    ("queues", "partition_rate_limit_period_sec", "double precision", true, None),
    ("streams", "workflow_uuid", "text", false, None),
    ("streams", "key", "text", false, None),
    ("streams", "value", "text", false, None),
    ("streams", "offset", "integer", false, None),
    ("streams", "function_id", "integer", false, Some("0")),
    ("streams", "serialization", "text", true, None),
    ("workflow_events", "workflow_uuid", "text", false, None),
    ("workflow_events", "key", "text", false, None),
    ("workflow_events", "value", "text", false, None),
    ("workflow_events", "serialization", "text", true, None),
    ("workflow_events_history", "workflow_uuid", "text", false, None),
    ("workflow_events_history", "function_id", "integer", false, None),
    ("workflow_events_history", "key", "text", false, None),
    ("workflow_events_history", "value", "text", false, None),
    ("workflow_events_history", "serialization", "text", true, None),
    ("workflow_input", "workflow_uuid", "text", false, None),
    ("workflow_input", "inputs", "text", true, None),
    ("workflow_input", "retention_timestamp", "bigint", false, Some(NOW_MS)),
    ("workflow_output", "workflow_uuid", "text", false, None),
    ("workflow_output", "output", "text", true, None),
    ("workflow_output", "error", "text", true, None),
    ("workflow_output", "retention_timestamp", "bigint", false, Some(NOW_MS)),
    ("workflow_schedules", "schedule_id", "text", false, None),
    ("workflow_schedules", "schedule_name", "text", false, None),
    ("workflow_schedules", "workflow_name", "text", false, None),
    ("workflow_schedules", "workflow_class_name", "text", true, None),
    ("workflow_schedules", "schedule", "text", false, None),
    ("workflow_schedules", "status", "text", false, Some("'ACTIVE'::text")),
    ("workflow_schedules", "context", "text", false, None),
    ("workflow_schedules", "last_fired_at", "text", true, None),
    ("workflow_schedules", "automatic_backfill", "boolean", false, Some("false")),
    ("workflow_schedules", "cron_timezone", "text", true, None),
    ("workflow_schedules", "queue_name", "text", true, None),
    ("workflow_schedules", "application_name", "text", true, None),
    ("workflow_status", "workflow_uuid", "text", false, None),
    ("workflow_status", "status", "text", true, None),
    ("workflow_status", "name", "text", true, None),
    ("workflow_status", "authenticated_user", "text", true, None),
    ("workflow_status", "assumed_role", "text", true, None),
    ("workflow_status", "authenticated_roles", "text", true, None),
    ("workflow_status", "request", "text", true, None),
    ("workflow_status", "output", "text", true, None),
    ("workflow_status", "error", "text", true, None),
    ("workflow_status", "executor_id", "text", true, None),
    ("workflow_status", "created_at", "bigint", false, Some(NOW_MS)),
    ("workflow_status", "updated_at", "bigint", false, Some(NOW_MS)),
    ("workflow_status", "application_version", "text", true, None),
    ("workflow_status", "application_id", "text", true, None),
    ("workflow_status", "class_name", "character varying(255)", true, Some("NULL::character varying")),
    ("workflow_status", "config_name", "character varying(255)", true, Some("NULL::character varying")),
    ("workflow_status", "recovery_attempts", "bigint", true, Some("0")),
    ("workflow_status", "queue_name", "text", true, None),
    ("workflow_status", "workflow_timeout_ms", "bigint", true, None),
    ("workflow_status", "workflow_deadline_epoch_ms", "bigint", true, None),
    ("workflow_status", "inputs", "text", true, None),
    ("workflow_status", "started_at_epoch_ms", "bigint", true, None),
    ("workflow_status", "deduplication_id", "text", true, None),
    ("workflow_status", "priority", "integer", false, Some("0")),
    ("workflow_status", "queue_partition_key", "text", true, None),
    ("workflow_status", "forked_from", "text", true, None),
    ("workflow_status", "owner_xid", "text", true, None),
    ("workflow_status", "parent_workflow_id", "text", true, None),
    ("workflow_status", "serialization", "text", true, None),
    ("workflow_status", "delay_until_epoch_ms", "bigint", true, None),
    ("workflow_status", "was_forked_from", "boolean", false, Some("false")),
    ("workflow_status", "rate_limited", "boolean", false, Some("false")),
    ("workflow_status", "completed_at", "bigint", true, None),
    ("workflow_status", "attributes", "jsonb", true, None),
    ("workflow_status", "schedule_name", "text", true, None),
    ("workflow_status", "debounce_deadline_epoch_ms", "bigint", true, None),
    ("workflow_status", "is_debounced", "boolean", false, Some("false")),
    ("workflow_status", "application_name", "text", true, None),
    ("workflow_status", "creator_xid", "text", true, None),
];

/// The target of all four foreign keys, which cascade both ways.
const FK: &str =
    "REFERENCES <s>.workflow_status(workflow_uuid) ON UPDATE CASCADE ON DELETE CASCADE";

/// Primary keys, unique constraints and foreign keys: (table, name, definition).
#[rustfmt::skip]
fn constraint_list() -> Vec<(&'static str, &'static str, String)> {
    let c = |t, n, d: &str| (t, n, d.to_owned());
    vec![
        c("application_versions", "application_versions_pkey", "PRIMARY KEY (version_id)"),
        c("application_versions", "application_versions_version_name_key", "UNIQUE (version_name)"),
        c("dbos_migrations", "dbos_migrations_pkey", "PRIMARY KEY (version)"),
        c("event_dispatch_kv", "event_dispatch_kv_pkey", "PRIMARY KEY (service_name, workflow_fn_name, key)"),
        c("notifications", "notifications_destination_uuid_fkey", &format!("FOREIGN KEY (destination_uuid) {FK}")),
        c("notifications", "notifications_pkey", "PRIMARY KEY (message_uuid)"),
        c("operation_outputs", "operation_outputs_pkey", "PRIMARY KEY (workflow_uuid, function_id)"),
        c("queues", "queues_name_key", "UNIQUE (name)"),
        c("queues", "queues_pkey", "PRIMARY KEY (queue_id)"),
        c("streams", "streams_pkey", "PRIMARY KEY (workflow_uuid, key, \"offset\")"),
        c("streams", "streams_workflow_uuid_fkey", &format!("FOREIGN KEY (workflow_uuid) {FK}")),
        c("workflow_events", "workflow_events_pkey", "PRIMARY KEY (workflow_uuid, key)"),
        c("workflow_events", "workflow_events_workflow_uuid_fkey", &format!("FOREIGN KEY (workflow_uuid) {FK}")),
        c("workflow_events_history", "workflow_events_history_pkey", "PRIMARY KEY (workflow_uuid, function_id, key)"),
        c("workflow_events_history", "workflow_events_history_workflow_uuid_fkey", &format!("FOREIGN KEY (workflow_uuid) {FK}")),
        c("workflow_input", "workflow_input_pkey", "PRIMARY KEY (workflow_uuid)"),
        c("workflow_output", "workflow_output_pkey", "PRIMARY KEY (workflow_uuid)"),
        c("workflow_schedules", "workflow_schedules_pkey", "PRIMARY KEY (schedule_id)"),
        c("workflow_schedules", "workflow_schedules_schedule_name_key", "UNIQUE (schedule_name)"),
        c("workflow_status", "workflow_status_pkey", "PRIMARY KEY (workflow_uuid)"),
    ]
}

/// Every index that is not a primary key: (name, definition after "ON <s>.").
#[rustfmt::skip]
const INDEXES: &[(&str, &str)] = &[
    ("application_versions_version_name_key", "application_versions USING btree (version_name)"),
    ("idx_application_versions_owner_timestamp", "application_versions USING btree (application_name, version_timestamp DESC)"),
    ("idx_application_versions_timestamp", "application_versions USING btree (version_timestamp DESC)"),
    ("idx_operation_outputs_completed_at_function_name_v2", "operation_outputs USING btree (completed_at_epoch_ms, function_name) INCLUDE (application_name)"),
    ("idx_operation_outputs_retention", "operation_outputs USING btree (retention_timestamp)"),
    ("idx_workflow_input_retention", "workflow_input USING btree (retention_timestamp)"),
    ("idx_workflow_output_retention", "workflow_output USING btree (retention_timestamp)"),
    ("idx_workflow_status_attributes", "workflow_status USING gin (attributes) WHERE (attributes IS NOT NULL)"),
    ("idx_workflow_status_completed_at", "workflow_status USING btree (completed_at) WHERE (completed_at IS NOT NULL)"),
    ("idx_workflow_status_deadline", "workflow_status USING btree (workflow_deadline_epoch_ms) WHERE ((status = ANY (ARRAY['ENQUEUED'::text, 'PENDING'::text, 'DELAYED'::text])) AND (workflow_deadline_epoch_ms IS NOT NULL))"),
    ("idx_workflow_status_delayed", "workflow_status USING btree (delay_until_epoch_ms) WHERE (status = 'DELAYED'::text)"),
    ("idx_workflow_status_failed", "workflow_status USING btree (status, created_at) WHERE (status = ANY (ARRAY['ERROR'::text, 'CANCELLED'::text, 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'::text]))"),
    ("idx_workflow_status_forked_from", "workflow_status USING btree (forked_from) WHERE (forked_from IS NOT NULL)"),
    ("idx_workflow_status_in_flight_v2", "workflow_status USING btree (queue_name, status, priority, created_at) INCLUDE (application_name) WHERE (status = ANY (ARRAY['ENQUEUED'::text, 'PENDING'::text]))"),
    ("idx_workflow_status_parent_workflow_id", "workflow_status USING btree (parent_workflow_id) WHERE (parent_workflow_id IS NOT NULL)"),
    ("idx_workflow_status_partition_dequeue_v3", "workflow_status USING btree (queue_name, status, queue_partition_key, priority, created_at, workflow_uuid) INCLUDE (application_name) WHERE ((status = ANY (ARRAY['ENQUEUED'::text, 'PENDING'::text])) AND (queue_partition_key IS NOT NULL))"),
    ("idx_workflow_status_pending", "workflow_status USING btree (created_at) WHERE (status = 'PENDING'::text)"),
    ("idx_workflow_status_rate_limited", "workflow_status USING btree (queue_name, started_at_epoch_ms) WHERE (rate_limited = true)"),
    ("idx_workflow_status_schedule_name", "workflow_status USING btree (schedule_name) WHERE (schedule_name IS NOT NULL)"),
    ("idx_workflow_status_started_at", "workflow_status USING btree (started_at_epoch_ms) WHERE (started_at_epoch_ms IS NOT NULL)"),
    ("idx_workflow_topic", "notifications USING btree (destination_uuid, topic)"),
    ("queues_name_key", "queues USING btree (name)"),
    ("uq_application_versions_owner_version", "application_versions USING btree (application_name, version_name) WHERE (application_name IS NOT NULL)"),
    ("uq_application_versions_unclaimed_version", "application_versions USING btree (version_name) WHERE (application_name IS NULL)"),
    ("uq_workflow_status_dedup_id", "workflow_status USING btree (queue_name, deduplication_id) WHERE (deduplication_id IS NOT NULL)"),
    ("workflow_schedules_schedule_name_key", "workflow_schedules USING btree (schedule_name)"),
    ("workflow_status_created_at_index", "workflow_status USING btree (created_at)"),
];

/// Indexes that are unique (the rest are not).
const UNIQUE_INDEXES: &[&str] = &[
    "application_versions_version_name_key",
    "queues_name_key",
    "uq_application_versions_owner_version",
    "uq_application_versions_unclaimed_version",
    "uq_workflow_status_dedup_id",
    "workflow_schedules_schedule_name_key",
];

/// The functions: (name, arguments as Postgres prints them, result).
const FUNCTIONS: &[(&str, &str, &str)] = &[
    (
        "enqueue_workflow",
        "workflow_name text, queue_name text, positional_args json[] DEFAULT ARRAY[]::json[], \
         named_args json DEFAULT '{}'::json, class_name text DEFAULT NULL::text, \
         config_name text DEFAULT NULL::text, workflow_id text DEFAULT NULL::text, \
         app_version text DEFAULT NULL::text, timeout_ms bigint DEFAULT NULL::bigint, \
         deadline_epoch_ms bigint DEFAULT NULL::bigint, deduplication_id text DEFAULT NULL::text, \
         priority integer DEFAULT NULL::integer, queue_partition_key text DEFAULT NULL::text, \
         authenticated_user text DEFAULT NULL::text, authenticated_roles text DEFAULT NULL::text, \
         delay_until_epoch_ms bigint DEFAULT NULL::bigint, application_name text DEFAULT NULL::text",
        "text",
    ),
    ("notifications_function", "", "trigger"),
    (
        "send_message",
        "destination_id text, message json, topic text DEFAULT NULL::text, \
         message_id text DEFAULT NULL::text",
        "void",
    ),
];

/// The one trigger, as pg_get_triggerdef prints it.
const TRIGGER: &str =
    "CREATE TRIGGER dbos_notifications_trigger AFTER INSERT ON <s>.notifications \
     FOR EACH ROW EXECUTE FUNCTION <s>.notifications_function()";

/// (table, column, type, nullable yes/no, default) in table-name then column order.
pub fn column_rows() -> Vec<Vec<String>> {
    COLUMNS
        .iter()
        .map(|(t, c, ty, null, def)| {
            let null = if *null { "yes" } else { "no" };
            [*t, *c, *ty, null, def.unwrap_or("")]
                .map(String::from)
                .to_vec()
        })
        .collect()
}

/// (qualified table, name, definition), sorted.
pub fn constraint_rows() -> Vec<Vec<String>> {
    let mut v: Vec<Vec<String>> = constraint_list()
        .into_iter()
        .map(|(t, n, d)| vec![format!("<s>.{t}"), n.to_owned(), d])
        .collect();
    v.sort();
    v
}

/// (name, pg_indexes.indexdef, unique), sorted by name.
pub fn index_rows() -> Vec<Vec<String>> {
    INDEXES
        .iter()
        .map(|(name, def)| {
            let unique = UNIQUE_INDEXES.contains(name);
            let kind = if unique { "UNIQUE INDEX" } else { "INDEX" };
            vec![
                name.to_string(),
                format!("CREATE {kind} {name} ON <s>.{def}"),
                unique.to_string(),
            ]
        })
        .collect()
}

/// (name, arguments, result, config), sorted by name.
pub fn function_rows() -> Vec<Vec<String>> {
    FUNCTIONS
        .iter()
        .map(|(n, a, r)| {
            [*n, *a, *r, "search_path=pg_catalog, pg_temp"]
                .map(String::from)
                .to_vec()
        })
        .collect()
}

/// (name, definition, enabled).
pub fn trigger_rows() -> Vec<Vec<String>> {
    vec![["dbos_notifications_trigger", TRIGGER, "O"]
        .map(String::from)
        .to_vec()]
}
