-- Brings a schema to the DBOS Transact 3.4 system-database layout (dbos_migrations = 125).
--
-- A template: `{s}` stands for the double-quoted schema name and is replaced before the
-- script runs. It runs inside one transaction under DBOS's migration advisory lock, and it
-- must stay idempotent: it completes an empty, partial or older schema and leaves a complete
-- one as it is. `dbos_migrations` belongs to the Rust caller and is never touched here.
--
-- The target is what a catalog query sees after `dbos migrate` of DBOS 3.4: same tables,
-- column order, types, defaults, nullability, constraint and index names and definitions,
-- function signatures and settings, and trigger. Function bodies are stead's own.

-- "already exists, skipping" notices would otherwise be logged for every line below.
SET LOCAL client_min_messages = warning;

CREATE SCHEMA IF NOT EXISTS {s};

-- Tables -------------------------------------------------------------------------------------
-- Each table is created empty and filled column by column, so one list both builds a fresh
-- table in DBOS's column order and adds whatever an older table lacks. A DEFAULT written
-- here must deparse to exactly DBOS's (e.g. no `DEFAULT NULL` on text: DBOS stores none).

CREATE TABLE IF NOT EXISTS {s}.workflow_status ();
ALTER TABLE {s}.workflow_status
    ADD COLUMN IF NOT EXISTS workflow_uuid text NOT NULL,
    ADD COLUMN IF NOT EXISTS status text,
    ADD COLUMN IF NOT EXISTS name text,
    ADD COLUMN IF NOT EXISTS authenticated_user text,
    ADD COLUMN IF NOT EXISTS assumed_role text,
    ADD COLUMN IF NOT EXISTS authenticated_roles text,
    ADD COLUMN IF NOT EXISTS request text,
    ADD COLUMN IF NOT EXISTS output text,
    ADD COLUMN IF NOT EXISTS error text,
    ADD COLUMN IF NOT EXISTS executor_id text,
    ADD COLUMN IF NOT EXISTS created_at bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint,
    ADD COLUMN IF NOT EXISTS updated_at bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint,
    ADD COLUMN IF NOT EXISTS application_version text,
    ADD COLUMN IF NOT EXISTS application_id text,
    ADD COLUMN IF NOT EXISTS class_name character varying(255) DEFAULT NULL,
    ADD COLUMN IF NOT EXISTS config_name character varying(255) DEFAULT NULL,
    ADD COLUMN IF NOT EXISTS recovery_attempts bigint DEFAULT 0,
    ADD COLUMN IF NOT EXISTS queue_name text,
    ADD COLUMN IF NOT EXISTS workflow_timeout_ms bigint,
    ADD COLUMN IF NOT EXISTS workflow_deadline_epoch_ms bigint,
    ADD COLUMN IF NOT EXISTS inputs text,
    ADD COLUMN IF NOT EXISTS started_at_epoch_ms bigint,
    ADD COLUMN IF NOT EXISTS deduplication_id text,
    ADD COLUMN IF NOT EXISTS priority integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS queue_partition_key text,
    ADD COLUMN IF NOT EXISTS forked_from text,
    ADD COLUMN IF NOT EXISTS owner_xid text,
    ADD COLUMN IF NOT EXISTS parent_workflow_id text,
    ADD COLUMN IF NOT EXISTS serialization text,
    ADD COLUMN IF NOT EXISTS delay_until_epoch_ms bigint,
    ADD COLUMN IF NOT EXISTS was_forked_from boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS rate_limited boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS completed_at bigint,
    ADD COLUMN IF NOT EXISTS attributes jsonb,
    ADD COLUMN IF NOT EXISTS schedule_name text,
    ADD COLUMN IF NOT EXISTS debounce_deadline_epoch_ms bigint,
    ADD COLUMN IF NOT EXISTS is_debounced boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS application_name text,
    ADD COLUMN IF NOT EXISTS creator_xid text;

CREATE TABLE IF NOT EXISTS {s}.operation_outputs ();
ALTER TABLE {s}.operation_outputs
    ADD COLUMN IF NOT EXISTS workflow_uuid text NOT NULL,
    ADD COLUMN IF NOT EXISTS function_id integer NOT NULL,
    ADD COLUMN IF NOT EXISTS function_name text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS output text,
    ADD COLUMN IF NOT EXISTS error text,
    ADD COLUMN IF NOT EXISTS child_workflow_id text,
    ADD COLUMN IF NOT EXISTS started_at_epoch_ms bigint,
    ADD COLUMN IF NOT EXISTS completed_at_epoch_ms bigint,
    ADD COLUMN IF NOT EXISTS serialization text,
    ADD COLUMN IF NOT EXISTS application_name text,
    ADD COLUMN IF NOT EXISTS retention_timestamp bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint;

CREATE TABLE IF NOT EXISTS {s}.notifications ();
ALTER TABLE {s}.notifications
    ADD COLUMN IF NOT EXISTS message_uuid text NOT NULL DEFAULT gen_random_uuid(),
    ADD COLUMN IF NOT EXISTS destination_uuid text NOT NULL,
    ADD COLUMN IF NOT EXISTS topic text,
    ADD COLUMN IF NOT EXISTS message text NOT NULL,
    ADD COLUMN IF NOT EXISTS created_at_epoch_ms bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint,
    ADD COLUMN IF NOT EXISTS serialization text,
    ADD COLUMN IF NOT EXISTS consumed boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS consumed_by_function_id integer;

CREATE TABLE IF NOT EXISTS {s}.workflow_events ();
ALTER TABLE {s}.workflow_events
    ADD COLUMN IF NOT EXISTS workflow_uuid text NOT NULL,
    ADD COLUMN IF NOT EXISTS key text NOT NULL,
    ADD COLUMN IF NOT EXISTS value text NOT NULL,
    ADD COLUMN IF NOT EXISTS serialization text;

CREATE TABLE IF NOT EXISTS {s}.workflow_events_history ();
ALTER TABLE {s}.workflow_events_history
    ADD COLUMN IF NOT EXISTS workflow_uuid text NOT NULL,
    ADD COLUMN IF NOT EXISTS function_id integer NOT NULL,
    ADD COLUMN IF NOT EXISTS key text NOT NULL,
    ADD COLUMN IF NOT EXISTS value text NOT NULL,
    ADD COLUMN IF NOT EXISTS serialization text;

CREATE TABLE IF NOT EXISTS {s}.streams ();
ALTER TABLE {s}.streams
    ADD COLUMN IF NOT EXISTS workflow_uuid text NOT NULL,
    ADD COLUMN IF NOT EXISTS key text NOT NULL,
    ADD COLUMN IF NOT EXISTS value text NOT NULL,
    ADD COLUMN IF NOT EXISTS "offset" integer NOT NULL,
    ADD COLUMN IF NOT EXISTS function_id integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS serialization text;

CREATE TABLE IF NOT EXISTS {s}.event_dispatch_kv ();
ALTER TABLE {s}.event_dispatch_kv
    ADD COLUMN IF NOT EXISTS service_name text NOT NULL,
    ADD COLUMN IF NOT EXISTS workflow_fn_name text NOT NULL,
    ADD COLUMN IF NOT EXISTS key text NOT NULL,
    ADD COLUMN IF NOT EXISTS value text,
    ADD COLUMN IF NOT EXISTS update_seq numeric(38,0),
    ADD COLUMN IF NOT EXISTS update_time numeric(38,15);

CREATE TABLE IF NOT EXISTS {s}.workflow_schedules ();
ALTER TABLE {s}.workflow_schedules
    ADD COLUMN IF NOT EXISTS schedule_id text NOT NULL,
    ADD COLUMN IF NOT EXISTS schedule_name text NOT NULL,
    ADD COLUMN IF NOT EXISTS workflow_name text NOT NULL,
    ADD COLUMN IF NOT EXISTS workflow_class_name text,
    ADD COLUMN IF NOT EXISTS schedule text NOT NULL,
    ADD COLUMN IF NOT EXISTS status text NOT NULL DEFAULT 'ACTIVE',
    ADD COLUMN IF NOT EXISTS context text NOT NULL,
    ADD COLUMN IF NOT EXISTS last_fired_at text,
    ADD COLUMN IF NOT EXISTS automatic_backfill boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS cron_timezone text,
    ADD COLUMN IF NOT EXISTS queue_name text,
    ADD COLUMN IF NOT EXISTS application_name text;

CREATE TABLE IF NOT EXISTS {s}.application_versions ();
ALTER TABLE {s}.application_versions
    ADD COLUMN IF NOT EXISTS version_id text NOT NULL,
    ADD COLUMN IF NOT EXISTS version_name text NOT NULL,
    ADD COLUMN IF NOT EXISTS version_timestamp bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint,
    ADD COLUMN IF NOT EXISTS created_at bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint,
    ADD COLUMN IF NOT EXISTS application_name text;

CREATE TABLE IF NOT EXISTS {s}.queues ();
ALTER TABLE {s}.queues
    ADD COLUMN IF NOT EXISTS queue_id text NOT NULL DEFAULT gen_random_uuid()::text,
    ADD COLUMN IF NOT EXISTS name text NOT NULL,
    ADD COLUMN IF NOT EXISTS concurrency integer,
    ADD COLUMN IF NOT EXISTS worker_concurrency integer,
    ADD COLUMN IF NOT EXISTS rate_limit_max integer,
    ADD COLUMN IF NOT EXISTS rate_limit_period_sec double precision,
    ADD COLUMN IF NOT EXISTS priority_enabled boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS partition_queue boolean NOT NULL DEFAULT false,
    ADD COLUMN IF NOT EXISTS polling_interval_sec double precision NOT NULL DEFAULT 1.0,
    ADD COLUMN IF NOT EXISTS created_at bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint,
    ADD COLUMN IF NOT EXISTS updated_at bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint,
    ADD COLUMN IF NOT EXISTS application_name text,
    ADD COLUMN IF NOT EXISTS partition_concurrency integer,
    ADD COLUMN IF NOT EXISTS partition_worker_concurrency integer,
    ADD COLUMN IF NOT EXISTS partition_rate_limit_max integer,
    ADD COLUMN IF NOT EXISTS partition_rate_limit_period_sec double precision;

CREATE TABLE IF NOT EXISTS {s}.workflow_input ();
ALTER TABLE {s}.workflow_input
    ADD COLUMN IF NOT EXISTS workflow_uuid text NOT NULL,
    ADD COLUMN IF NOT EXISTS inputs text,
    ADD COLUMN IF NOT EXISTS retention_timestamp bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint;

CREATE TABLE IF NOT EXISTS {s}.workflow_output ();
ALTER TABLE {s}.workflow_output
    ADD COLUMN IF NOT EXISTS workflow_uuid text NOT NULL,
    ADD COLUMN IF NOT EXISTS output text,
    ADD COLUMN IF NOT EXISTS error text,
    ADD COLUMN IF NOT EXISTS retention_timestamp bigint NOT NULL
        DEFAULT (extract(epoch FROM now()) * 1000.0)::bigint;

-- Objects older DBOS versions created and later dropped -----------------------------------
-- A schema an older DBOS migrated still has them; 3.4 has none of them.

DROP TRIGGER IF EXISTS dbos_streams_trigger ON {s}.streams;
DROP TRIGGER IF EXISTS dbos_workflow_events_trigger ON {s}.workflow_events;
DROP FUNCTION IF EXISTS {s}.streams_function();
DROP FUNCTION IF EXISTS {s}.workflow_events_function();
ALTER TABLE {s}.workflow_status DROP CONSTRAINT IF EXISTS uq_workflow_status_queue_name_dedup_id;
ALTER TABLE {s}.operation_outputs DROP CONSTRAINT IF EXISTS operation_outputs_workflow_uuid_fkey;
ALTER TABLE {s}.operation_outputs DROP CONSTRAINT IF EXISTS operation_outputs_workflow_uuid_foreign;
DROP INDEX IF EXISTS {s}.workflow_status_executor_id_index;
DROP INDEX IF EXISTS {s}.workflow_status_status_index;
DROP INDEX IF EXISTS {s}.idx_workflow_status_queue_status_started;
DROP INDEX IF EXISTS {s}.idx_notifications;
DROP INDEX IF EXISTS {s}.idx_workflow_status_in_flight;
DROP INDEX IF EXISTS {s}.idx_workflow_status_partition_dequeue;
DROP INDEX IF EXISTS {s}.idx_workflow_status_partition_dequeue_v2;
DROP INDEX IF EXISTS {s}.idx_operation_outputs_completed_at_function_name;

-- Constraints --------------------------------------------------------------------------------
-- `def` is what pg_get_constraintdef prints (with the schema of the referenced table left
-- out). A constraint of the same name but another definition is dropped and re-added, a
-- primary key under another name is dropped, and a missing constraint is added.

DO $mig$
DECLARE
    ns oid := '{s}'::regnamespace;
    -- How pg_get_constraintdef names a table of this schema (regnamespace prints it quoted
    -- as needed, like the constraint text does).
    prefix text := '{s}'::regnamespace::text || '.';
    c record;
    found_def text;
BEGIN
    FOR c IN
        SELECT * FROM (VALUES
            (1, 'workflow_status', 'workflow_status_pkey', 'PRIMARY KEY (workflow_uuid)'),
            (2, 'operation_outputs', 'operation_outputs_pkey',
                'PRIMARY KEY (workflow_uuid, function_id)'),
            (3, 'notifications', 'notifications_pkey', 'PRIMARY KEY (message_uuid)'),
            (4, 'workflow_events', 'workflow_events_pkey', 'PRIMARY KEY (workflow_uuid, key)'),
            (5, 'workflow_events_history', 'workflow_events_history_pkey',
                'PRIMARY KEY (workflow_uuid, function_id, key)'),
            (6, 'streams', 'streams_pkey', 'PRIMARY KEY (workflow_uuid, key, "offset")'),
            (7, 'event_dispatch_kv', 'event_dispatch_kv_pkey',
                'PRIMARY KEY (service_name, workflow_fn_name, key)'),
            (8, 'workflow_schedules', 'workflow_schedules_pkey', 'PRIMARY KEY (schedule_id)'),
            (9, 'workflow_schedules', 'workflow_schedules_schedule_name_key',
                'UNIQUE (schedule_name)'),
            (10, 'application_versions', 'application_versions_pkey', 'PRIMARY KEY (version_id)'),
            (11, 'application_versions', 'application_versions_version_name_key',
                'UNIQUE (version_name)'),
            (12, 'queues', 'queues_pkey', 'PRIMARY KEY (queue_id)'),
            (13, 'queues', 'queues_name_key', 'UNIQUE (name)'),
            (14, 'workflow_input', 'workflow_input_pkey', 'PRIMARY KEY (workflow_uuid)'),
            (15, 'workflow_output', 'workflow_output_pkey', 'PRIMARY KEY (workflow_uuid)'),
            (16, 'notifications', 'notifications_destination_uuid_fkey',
                'FOREIGN KEY (destination_uuid) REFERENCES workflow_status(workflow_uuid) '
                'ON UPDATE CASCADE ON DELETE CASCADE'),
            (17, 'workflow_events', 'workflow_events_workflow_uuid_fkey',
                'FOREIGN KEY (workflow_uuid) REFERENCES workflow_status(workflow_uuid) '
                'ON UPDATE CASCADE ON DELETE CASCADE'),
            (18, 'workflow_events_history', 'workflow_events_history_workflow_uuid_fkey',
                'FOREIGN KEY (workflow_uuid) REFERENCES workflow_status(workflow_uuid) '
                'ON UPDATE CASCADE ON DELETE CASCADE'),
            (19, 'streams', 'streams_workflow_uuid_fkey',
                'FOREIGN KEY (workflow_uuid) REFERENCES workflow_status(workflow_uuid) '
                'ON UPDATE CASCADE ON DELETE CASCADE')
        ) AS t(ord, tbl, name, def)
        ORDER BY ord
    LOOP
        -- A primary key under another name would block ours.
        IF c.def LIKE 'PRIMARY KEY%' THEN
            PERFORM 1 FROM pg_constraint k
            WHERE k.conrelid = format('{s}.%I', c.tbl)::regclass
              AND k.contype = 'p' AND k.conname <> c.name;
            IF FOUND THEN
                EXECUTE (
                    SELECT format('ALTER TABLE {s}.%I DROP CONSTRAINT %I CASCADE', c.tbl, k.conname)
                    FROM pg_constraint k
                    WHERE k.conrelid = format('{s}.%I', c.tbl)::regclass AND k.contype = 'p'
                );
            END IF;
        END IF;

        SELECT replace(pg_get_constraintdef(k.oid), 'REFERENCES ' || prefix, 'REFERENCES ')
        INTO found_def
        FROM pg_constraint k
        WHERE k.connamespace = ns AND k.conname = c.name
          AND k.conrelid = format('{s}.%I', c.tbl)::regclass;

        IF found_def IS DISTINCT FROM c.def THEN
            IF found_def IS NOT NULL THEN
                -- CASCADE: re-keying workflow_status drops the foreign keys, re-added below.
                EXECUTE format('ALTER TABLE {s}.%I DROP CONSTRAINT %I CASCADE', c.tbl, c.name);
            END IF;
            EXECUTE format('ALTER TABLE {s}.%I ADD CONSTRAINT %I %s', c.tbl, c.name,
                           replace(c.def, 'REFERENCES ', 'REFERENCES {s}.'));
        END IF;
    END LOOP;
END
$mig$;

-- Secondary indexes --------------------------------------------------------------------------
-- `def` is what pg_get_indexdef prints after "USING ". An index of the same name but another
-- definition (older DBOS versions had non-partial ones under some of these names) is
-- rebuilt; a missing one is created.

DO $mig$
DECLARE
    ns oid := '{s}'::regnamespace;
    i record;
    found_def text;
BEGIN
    FOR i IN
        SELECT * FROM (VALUES
            ('workflow_status', false, 'workflow_status_created_at_index',
                'btree (created_at)'),
            ('workflow_status', false, 'idx_workflow_status_forked_from',
                'btree (forked_from) WHERE (forked_from IS NOT NULL)'),
            ('workflow_status', false, 'idx_workflow_status_parent_workflow_id',
                'btree (parent_workflow_id) WHERE (parent_workflow_id IS NOT NULL)'),
            ('workflow_status', true, 'uq_workflow_status_dedup_id',
                'btree (queue_name, deduplication_id) WHERE (deduplication_id IS NOT NULL)'),
            ('workflow_status', false, 'idx_workflow_status_delayed',
                'btree (delay_until_epoch_ms) WHERE (status = ''DELAYED''::text)'),
            ('workflow_status', false, 'idx_workflow_status_pending',
                'btree (created_at) WHERE (status = ''PENDING''::text)'),
            ('workflow_status', false, 'idx_workflow_status_failed',
                'btree (status, created_at) WHERE (status = ANY (ARRAY[''ERROR''::text, '
                '''CANCELLED''::text, ''MAX_RECOVERY_ATTEMPTS_EXCEEDED''::text]))'),
            ('workflow_status', false, 'idx_workflow_status_rate_limited',
                'btree (queue_name, started_at_epoch_ms) WHERE (rate_limited = true)'),
            ('workflow_status', false, 'idx_workflow_status_completed_at',
                'btree (completed_at) WHERE (completed_at IS NOT NULL)'),
            ('workflow_status', false, 'idx_workflow_status_started_at',
                'btree (started_at_epoch_ms) WHERE (started_at_epoch_ms IS NOT NULL)'),
            ('workflow_status', false, 'idx_workflow_status_attributes',
                'gin (attributes) WHERE (attributes IS NOT NULL)'),
            ('workflow_status', false, 'idx_workflow_status_schedule_name',
                'btree (schedule_name) WHERE (schedule_name IS NOT NULL)'),
            ('workflow_status', false, 'idx_workflow_status_in_flight_v2',
                'btree (queue_name, status, priority, created_at) INCLUDE (application_name) '
                'WHERE (status = ANY (ARRAY[''ENQUEUED''::text, ''PENDING''::text]))'),
            ('workflow_status', false, 'idx_workflow_status_partition_dequeue_v3',
                'btree (queue_name, status, queue_partition_key, priority, created_at, '
                'workflow_uuid) INCLUDE (application_name) WHERE ((status = ANY '
                '(ARRAY[''ENQUEUED''::text, ''PENDING''::text])) AND '
                '(queue_partition_key IS NOT NULL))'),
            ('workflow_status', false, 'idx_workflow_status_deadline',
                'btree (workflow_deadline_epoch_ms) WHERE ((status = ANY (ARRAY['
                '''ENQUEUED''::text, ''PENDING''::text, ''DELAYED''::text])) AND '
                '(workflow_deadline_epoch_ms IS NOT NULL))'),
            ('notifications', false, 'idx_workflow_topic',
                'btree (destination_uuid, topic)'),
            ('operation_outputs', false, 'idx_operation_outputs_retention',
                'btree (retention_timestamp)'),
            ('operation_outputs', false, 'idx_operation_outputs_completed_at_function_name_v2',
                'btree (completed_at_epoch_ms, function_name) INCLUDE (application_name)'),
            ('workflow_input', false, 'idx_workflow_input_retention',
                'btree (retention_timestamp)'),
            ('workflow_output', false, 'idx_workflow_output_retention',
                'btree (retention_timestamp)'),
            ('application_versions', true, 'uq_application_versions_owner_version',
                'btree (application_name, version_name) WHERE (application_name IS NOT NULL)'),
            ('application_versions', true, 'uq_application_versions_unclaimed_version',
                'btree (version_name) WHERE (application_name IS NULL)'),
            ('application_versions', false, 'idx_application_versions_timestamp',
                'btree (version_timestamp DESC)'),
            ('application_versions', false, 'idx_application_versions_owner_timestamp',
                'btree (application_name, version_timestamp DESC)')
        ) AS t(tbl, uniq, name, def)
    LOOP
        SELECT CASE
                   WHEN x.indrelid = format('{s}.%I', i.tbl)::regclass
                        AND x.indisunique = i.uniq AND x.indisvalid
                   THEN substring(pg_get_indexdef(x.indexrelid) FROM ' USING (.*)$')
                   ELSE '<different>'
               END
        INTO found_def
        FROM pg_class ic
        JOIN pg_index x ON x.indexrelid = ic.oid
        WHERE ic.relnamespace = ns AND ic.relname = i.name;

        IF found_def IS DISTINCT FROM i.def THEN
            IF found_def IS NOT NULL THEN
                EXECUTE format('DROP INDEX {s}.%I', i.name);
            END IF;
            EXECUTE format('CREATE %sINDEX %I ON {s}.%I USING %s',
                           CASE WHEN i.uniq THEN 'UNIQUE ' ELSE '' END, i.name, i.tbl, i.def);
        END IF;
    END LOOP;
END
$mig$;

-- Functions ----------------------------------------------------------------------------------
-- CREATE OR REPLACE keeps grants on an existing function but cannot change its parameter
-- names or return type, so a version whose signature differs (older DBOS releases had
-- shorter enqueue_workflow signatures) is dropped first.

DO $mig$
DECLARE
    f record;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure AS sig
        FROM pg_proc p
        WHERE p.pronamespace = '{s}'::regnamespace
          AND (   (p.proname = 'enqueue_workflow'
                   AND (pg_get_function_identity_arguments(p.oid) <>
                        'workflow_name text, queue_name text, positional_args json[], '
                        'named_args json, class_name text, config_name text, workflow_id text, '
                        'app_version text, timeout_ms bigint, deadline_epoch_ms bigint, '
                        'deduplication_id text, priority integer, queue_partition_key text, '
                        'authenticated_user text, authenticated_roles text, '
                        'delay_until_epoch_ms bigint, application_name text'
                        OR pg_get_function_result(p.oid) <> 'text'))
               OR (p.proname = 'send_message'
                   AND (pg_get_function_identity_arguments(p.oid) <>
                        'destination_id text, message json, topic text, message_id text'
                        OR pg_get_function_result(p.oid) <> 'void')))
    LOOP
        EXECUTE format('DROP FUNCTION %s', f.sig);
    END LOOP;
END
$mig$;

-- Enqueues a workflow from plain SQL, in DBOS's portable format, so any language with a
-- Postgres driver can start work. Returns the workflow id. Enqueuing an id that exists
-- only touches its updated_at, so a retried call is harmless.
CREATE OR REPLACE FUNCTION {s}.enqueue_workflow(
    workflow_name text,
    queue_name text,
    positional_args json[] DEFAULT ARRAY[]::json[],
    named_args json DEFAULT '{}'::json,
    class_name text DEFAULT NULL,
    config_name text DEFAULT NULL,
    workflow_id text DEFAULT NULL,
    app_version text DEFAULT NULL,
    timeout_ms bigint DEFAULT NULL,
    deadline_epoch_ms bigint DEFAULT NULL,
    deduplication_id text DEFAULT NULL,
    priority integer DEFAULT NULL,
    queue_partition_key text DEFAULT NULL,
    authenticated_user text DEFAULT NULL,
    authenticated_roles text DEFAULT NULL,
    delay_until_epoch_ms bigint DEFAULT NULL,
    application_name text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    new_id text;
    now_ms bigint;
    inputs_json text;
BEGIN
    IF enqueue_workflow.workflow_name IS NULL OR enqueue_workflow.workflow_name = '' THEN
        RAISE EXCEPTION 'enqueue_workflow: workflow_name must be a non-empty string'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue_workflow.queue_name IS NULL OR enqueue_workflow.queue_name = '' THEN
        RAISE EXCEPTION 'enqueue_workflow: queue_name must be a non-empty string'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue_workflow.workflow_id = '' THEN
        RAISE EXCEPTION 'enqueue_workflow: workflow_id must be NULL (for a new UUID) or non-empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF json_typeof(enqueue_workflow.named_args) <> 'object' THEN
        RAISE EXCEPTION 'enqueue_workflow: named_args must be a JSON object, not %',
            json_typeof(enqueue_workflow.named_args)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue_workflow.delay_until_epoch_ms < 0 THEN
        RAISE EXCEPTION 'enqueue_workflow: delay_until_epoch_ms must be >= 0, got %',
            enqueue_workflow.delay_until_epoch_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    new_id := coalesce(enqueue_workflow.workflow_id, gen_random_uuid()::text);
    now_ms := floor(extract(epoch FROM now()) * 1000)::bigint;
    -- Missing arguments are written as empty ones; readers treat both alike.
    inputs_json := json_build_object(
        'positionalArgs', coalesce(to_json(enqueue_workflow.positional_args), '[]'::json),
        'namedArgs', coalesce(enqueue_workflow.named_args, '{}'::json)
    )::text;

    BEGIN
        INSERT INTO {s}.workflow_status (
            workflow_uuid, status, name, class_name, config_name, queue_name,
            deduplication_id, priority, queue_partition_key, application_version,
            created_at, updated_at, recovery_attempts, workflow_timeout_ms,
            workflow_deadline_epoch_ms, owner_xid, serialization, authenticated_user,
            authenticated_roles, delay_until_epoch_ms, application_name
        ) VALUES (
            new_id,
            CASE WHEN enqueue_workflow.delay_until_epoch_ms IS NULL
                 THEN 'ENQUEUED' ELSE 'DELAYED' END,
            enqueue_workflow.workflow_name, enqueue_workflow.class_name,
            enqueue_workflow.config_name, enqueue_workflow.queue_name,
            enqueue_workflow.deduplication_id, coalesce(enqueue_workflow.priority, 0),
            enqueue_workflow.queue_partition_key, enqueue_workflow.app_version,
            now_ms, now_ms, 0, enqueue_workflow.timeout_ms,
            enqueue_workflow.deadline_epoch_ms, gen_random_uuid()::text, 'portable_json',
            enqueue_workflow.authenticated_user, enqueue_workflow.authenticated_roles,
            enqueue_workflow.delay_until_epoch_ms, enqueue_workflow.application_name
        )
        ON CONFLICT (workflow_uuid) DO UPDATE SET updated_at = excluded.updated_at;
    EXCEPTION WHEN unique_violation THEN
        -- The id conflict is handled above, so this is the (queue, deduplication id) index.
        RAISE EXCEPTION 'DBOS queue duplicated: queue % already has a workflow with deduplication ID %',
            enqueue_workflow.queue_name, enqueue_workflow.deduplication_id
            USING ERRCODE = 'unique_violation',
                  DETAIL = format('Workflow %s was not enqueued.', new_id);
    END;

    INSERT INTO {s}.workflow_input (workflow_uuid, inputs, retention_timestamp)
    VALUES (new_id, inputs_json, now_ms)
    ON CONFLICT (workflow_uuid) DO NOTHING;

    RETURN new_id;
END
$fn$;

-- Sends a message to a workflow from plain SQL, in DBOS's portable format. A message id
-- already sent is ignored, so a retried call delivers once.
CREATE OR REPLACE FUNCTION {s}.send_message(
    destination_id text,
    message json,
    topic text DEFAULT NULL,
    message_id text DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    INSERT INTO {s}.notifications (message_uuid, destination_uuid, topic, message, serialization)
    VALUES (
        coalesce(send_message.message_id, gen_random_uuid()::text),
        send_message.destination_id,
        -- DBOS's stand-in for "no topic", so that (destination, topic) lookups can use "=".
        coalesce(send_message.topic, '__null__topic__'),
        send_message.message::text,
        'portable_json'
    )
    ON CONFLICT (message_uuid) DO NOTHING;
EXCEPTION WHEN foreign_key_violation THEN
    RAISE EXCEPTION 'DBOS non-existent workflow: cannot send to workflow %, which does not exist',
        send_message.destination_id
        USING ERRCODE = 'foreign_key_violation';
END
$fn$;

-- Wakes receivers waiting on (destination, topic) without polling.
CREATE OR REPLACE FUNCTION {s}.notifications_function() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    PERFORM pg_notify('dbos_notifications_channel', NEW.destination_uuid || '::' || NEW.topic);
    RETURN NEW;
END
$fn$;

-- Recreated rather than checked: this leaves exactly DBOS's definition, enabled.
DROP TRIGGER IF EXISTS dbos_notifications_trigger ON {s}.notifications;
CREATE TRIGGER dbos_notifications_trigger
    AFTER INSERT ON {s}.notifications
    FOR EACH ROW EXECUTE FUNCTION {s}.notifications_function();
