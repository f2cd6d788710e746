-- stead's functions for a sharded (Citus) layout, installed in every bucket schema and
-- delegated to the node that holds it (`create_distributed_function`, colocated with the
-- schema's tables), so one call runs whole on that node.
--
-- Each one is a statement stead runs on plain Postgres as one data-modifying statement, which
-- Citus cannot run as written on a distributed schema (an INSERT inside a CTE is planned as
-- several steps through the coordinator, and any INSERT .. SELECT into a single-shard table is
-- deparsed wrongly by Citus 13.2). Here the same work is done with single-row statements; each
-- takes the parameters and returns the columns of the statement it stands for (`src/sysdb/
-- postgres/<concept>.rs`), which the store suite checks on both.
--
-- A template: `{s}` stands for the double-quoted schema name. Idempotent (CREATE OR REPLACE).

-- steps.rs, the checkpoint: each step is written only while its workflow is PENDING under the
-- writer's owner token; the keys written come back.
CREATE OR REPLACE FUNCTION {s}.stead_checkpoint(
    p_id text[], p_fid int4[], p_name text[], p_output text[], p_error text[], p_child text[],
    p_started int8[], p_completed int8[], p_app text[], p_owner text[])
RETURNS TABLE (o_id text, o_fid int4)
LANGUAGE plpgsql AS $fn$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_id, 1), 0) LOOP
        PERFORM 1 FROM {s}.workflow_status w
        WHERE w.workflow_uuid = p_id[i] AND w.status = 'PENDING' AND w.owner_xid = p_owner[i];
        CONTINUE WHEN NOT FOUND;
        INSERT INTO {s}.operation_outputs (workflow_uuid, function_id, function_name, output,
            error, child_workflow_id, started_at_epoch_ms, completed_at_epoch_ms, serialization,
            application_name)
        VALUES (p_id[i], p_fid[i], p_name[i], p_output[i], p_error[i], p_child[i], p_started[i],
            p_completed[i], 'portable_json', p_app[i])
        ON CONFLICT (workflow_uuid, function_id) DO NOTHING;
        IF FOUND THEN
            o_id := p_id[i];
            o_fid := p_fid[i];
            RETURN NEXT;
        END IF;
    END LOOP;
END
$fn$;
SELECT create_distributed_function('{s}.stead_checkpoint(text[], int4[], text[], text[], text[], text[], int8[], int8[], text[], text[])', colocate_with := '{s}.workflow_status');

-- start.rs: creates each row unless its id or its queue's deduplication id is taken; one answer
-- row per request (its place, created, the existing row's name, status and owner, the
-- deduplication id's holder), and enqueues announced once per queue.
CREATE OR REPLACE FUNCTION {s}.stead_start(
    p_id text[], p_name text[], p_owner text[], p_inputs text[], p_status text[], p_queue text[],
    p_priority int4[], p_dedup text[], p_part text[], p_delay int8[], p_created int8[],
    p_timeout int8[], p_deadline int8[], p_parent text[], p_version text[], p_attrs text[],
    p_executor text, p_app text)
RETURNS TABLE (o_n int8, o_created bool, o_name text, o_status text, o_owner text,
    o_holder text, o_announced int8)
LANGUAGE plpgsql AS $fn$
DECLARE
    announced text[] := '{}';
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_id, 1), 0) LOOP
        o_n := i;
        o_name := NULL; o_status := NULL; o_owner := NULL; o_holder := NULL;
        INSERT INTO {s}.workflow_status AS w (
            workflow_uuid, status, name, owner_xid, executor_id, application_version,
            application_name, queue_name, priority, deduplication_id, queue_partition_key,
            delay_until_epoch_ms, recovery_attempts, serialization, created_at, updated_at,
            started_at_epoch_ms, workflow_timeout_ms, workflow_deadline_epoch_ms,
            parent_workflow_id, attributes, inputs)
        VALUES (p_id[i], p_status[i], p_name[i], p_owner[i],
            CASE WHEN p_owner[i] IS NOT NULL THEN p_executor END, p_version[i], p_app,
            p_queue[i], p_priority[i], p_dedup[i], p_part[i], p_delay[i],
            CASE WHEN p_owner[i] IS NOT NULL THEN 1 ELSE 0 END, 'portable_json', p_created[i],
            p_created[i], CASE WHEN p_owner[i] IS NOT NULL THEN p_created[i] END, p_timeout[i],
            p_deadline[i], p_parent[i], p_attrs[i]::jsonb, p_inputs[i])
        ON CONFLICT DO NOTHING;
        o_created := FOUND;
        IF o_created THEN
            IF p_queue[i] IS NOT NULL AND p_owner[i] IS NULL
               AND NOT p_queue[i] = ANY(announced) THEN
                PERFORM pg_notify('stead_queue_channel', p_queue[i]);
                announced := announced || p_queue[i];
            END IF;
        ELSE
            SELECT w.name, w.status, w.owner_xid INTO o_name, o_status, o_owner
            FROM {s}.workflow_status w WHERE w.workflow_uuid = p_id[i];
            IF NOT FOUND AND p_dedup[i] IS NOT NULL THEN
                SELECT d.workflow_uuid INTO o_holder FROM {s}.workflow_status d
                WHERE d.queue_name = p_queue[i] AND d.deduplication_id = p_dedup[i];
            END IF;
        END IF;
        o_announced := coalesce(array_length(announced, 1), 0);
        RETURN NEXT;
    END LOOP;
END
$fn$;
SELECT create_distributed_function('{s}.stead_start(text[], text[], text[], text[], text[], text[], int4[], text[], text[], int8[], int8[], int8[], int8[], text[], text[], text[], text, text)', colocate_with := '{s}.workflow_status');

-- ops.rs: a durable call's row, written when the workflow is PENDING under the caller's owner
-- token and the call has none yet; the output and serialization written come back.
CREATE OR REPLACE FUNCTION {s}.stead_record(
    p_id text, p_owner text, p_fid int4, p_started int8, p_completed int8, p_app text,
    p_name text, p_output text, p_serialization text, OUT o_output text,
    OUT o_serialization text, OUT o_written bool)
LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {s}.operation_outputs (workflow_uuid, function_id, function_name, output,
        serialization, started_at_epoch_ms, completed_at_epoch_ms, application_name)
    VALUES (p_id, p_fid, p_name, p_output, p_serialization, p_started, p_completed, p_app)
    ON CONFLICT (workflow_uuid, function_id) DO NOTHING
    RETURNING output, serialization INTO o_output, o_serialization;
    o_written := FOUND;
END
$fn$;

-- Whether workflow p_id is PENDING under owner token p_owner.
CREATE OR REPLACE FUNCTION {s}.stead_own(p_id text, p_owner text) RETURNS bool
LANGUAGE sql STABLE AS $fn$
    SELECT EXISTS (SELECT 1 FROM {s}.workflow_status
                   WHERE workflow_uuid = p_id AND status = 'PENDING' AND owner_xid = p_owner)
$fn$;

-- Sets event p_key of p_id (and, with p_history, its history row of call p_fid), announced.
CREATE OR REPLACE FUNCTION {s}.stead_event(
    p_id text, p_fid int4, p_key text, p_value text, p_history bool) RETURNS int8
LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO {s}.workflow_events (workflow_uuid, key, value, serialization)
    VALUES (p_id, p_key, p_value, 'portable_json')
    ON CONFLICT (workflow_uuid, key)
    DO UPDATE SET value = EXCLUDED.value, serialization = EXCLUDED.serialization;
    IF p_history THEN
        INSERT INTO {s}.workflow_events_history (workflow_uuid, function_id, key, value,
            serialization)
        VALUES (p_id, p_fid, p_key, p_value, 'portable_json')
        ON CONFLICT (workflow_uuid, function_id, key) DO NOTHING;
    END IF;
    PERFORM pg_notify('dbos_workflow_events_channel', p_id || '::' || p_key);
    RETURN 1;
END
$fn$;

-- The ops, each with its statement's parameters ($1 workflow, $2 owner, $3 call, $4 started,
-- $5 completed, $6 app, then its own) and answer (written, output, serialization, own, extra).
CREATE OR REPLACE FUNCTION {s}.stead_op_send(
    p_id text, p_owner text, p_fid int4, p_started int8, p_completed int8, p_app text,
    p_msg text, p_dest text, p_topic text, p_message text)
RETURNS TABLE (o_written int8, o_output text, o_serialization text, o_own bool, o_extra int8)
LANGUAGE plpgsql AS $fn$
DECLARE r record;
BEGIN
    o_own := {s}.stead_own(p_id, p_owner);
    o_written := 0; o_extra := 0;
    IF o_own THEN
        r := {s}.stead_record(p_id, p_owner, p_fid, p_started, p_completed, p_app,
            'DBOS.send', 'null', 'portable_json');
        IF r.o_written THEN
            o_written := 1;
            INSERT INTO {s}.notifications (message_uuid, destination_uuid, topic, message,
                serialization)
            VALUES (p_msg, p_dest, p_topic, p_message, 'portable_json')
            ON CONFLICT (message_uuid) DO NOTHING;
            IF FOUND THEN o_extra := 1; END IF;
        END IF;
    END IF;
    RETURN NEXT;
END
$fn$;
SELECT create_distributed_function('{s}.stead_op_send(text, text, int4, int8, int8, text, text, text, text, text)', colocate_with := '{s}.workflow_status');

CREATE OR REPLACE FUNCTION {s}.stead_op_recv(
    p_id text, p_owner text, p_fid int4, p_started int8, p_completed int8, p_app text,
    p_topic text, p_give_up bool)
RETURNS TABLE (o_written int8, o_output text, o_serialization text, o_own bool, o_extra int8)
LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
    m_uuid text;
    m_message text;
    m_serialization text;
BEGIN
    o_own := {s}.stead_own(p_id, p_owner);
    o_written := 0;
    PERFORM 1 FROM {s}.operation_outputs WHERE workflow_uuid = p_id AND function_id = p_fid;
    o_extra := CASE WHEN FOUND THEN 1 ELSE 0 END;
    IF o_own AND o_extra = 0 THEN
        SELECT n.message_uuid INTO m_uuid FROM {s}.notifications n
        WHERE n.destination_uuid = p_id AND n.topic = p_topic AND NOT n.consumed
        ORDER BY n.created_at_epoch_ms, n.message_uuid LIMIT 1 FOR UPDATE SKIP LOCKED;
        IF m_uuid IS NOT NULL THEN
            UPDATE {s}.notifications SET consumed = true, consumed_by_function_id = p_fid
            WHERE message_uuid = m_uuid RETURNING message, serialization
            INTO m_message, m_serialization;
        END IF;
        IF m_uuid IS NOT NULL OR p_give_up THEN
            r := {s}.stead_record(p_id, p_owner, p_fid, p_started, p_completed, p_app,
                'DBOS.recv', coalesce(m_message, 'null'),
                coalesce(m_serialization, 'portable_json'));
            IF r.o_written THEN
                o_written := 1;
                o_output := r.o_output;
                o_serialization := r.o_serialization;
            END IF;
        END IF;
    END IF;
    RETURN NEXT;
END
$fn$;
SELECT create_distributed_function('{s}.stead_op_recv(text, text, int4, int8, int8, text, text, bool)', colocate_with := '{s}.workflow_status');

CREATE OR REPLACE FUNCTION {s}.stead_op_set_event(
    p_id text, p_owner text, p_fid int4, p_started int8, p_completed int8, p_app text,
    p_key text, p_value text)
RETURNS TABLE (o_written int8, o_output text, o_serialization text, o_own bool, o_extra int8)
LANGUAGE plpgsql AS $fn$
DECLARE r record;
BEGIN
    o_own := {s}.stead_own(p_id, p_owner);
    o_written := 0; o_extra := 0;
    IF o_own THEN
        r := {s}.stead_record(p_id, p_owner, p_fid, p_started, p_completed, p_app,
            'DBOS.setEvent', 'null', 'portable_json');
        IF r.o_written THEN
            o_written := 1;
            o_extra := {s}.stead_event(p_id, p_fid, p_key, p_value, true);
        END IF;
    END IF;
    RETURN NEXT;
END
$fn$;
SELECT create_distributed_function('{s}.stead_op_set_event(text, text, int4, int8, int8, text, text, text)', colocate_with := '{s}.workflow_status');

CREATE OR REPLACE FUNCTION {s}.stead_op_write_stream(
    p_id text, p_owner text, p_fid int4, p_started int8, p_completed int8, p_app text,
    p_key text, p_value text, p_name text)
RETURNS TABLE (o_written int8, o_output text, o_serialization text, o_own bool, o_extra int8)
LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
    next_offset int4;
BEGIN
    o_own := {s}.stead_own(p_id, p_owner);
    o_written := 0; o_extra := 0;
    IF o_own THEN
        r := {s}.stead_record(p_id, p_owner, p_fid, p_started, p_completed, p_app,
            p_name, 'null', 'portable_json');
        IF r.o_written THEN
            o_written := 1;
            -- Citus takes no subquery in an INSERT's values.
            SELECT coalesce(max("offset") + 1, 0) INTO next_offset FROM {s}.streams
            WHERE workflow_uuid = p_id AND key = p_key;
            INSERT INTO {s}.streams (workflow_uuid, key, value, "offset", function_id,
                serialization)
            VALUES (p_id, p_key, p_value, next_offset, p_fid, 'portable_json');
            PERFORM pg_notify('dbos_streams_channel', p_id || '::' || p_key);
            o_extra := 1;
        END IF;
    END IF;
    RETURN NEXT;
END
$fn$;
SELECT create_distributed_function('{s}.stead_op_write_stream(text, text, int4, int8, int8, text, text, text, text)', colocate_with := '{s}.workflow_status');

CREATE OR REPLACE FUNCTION {s}.stead_op_accept_update(
    p_id text, p_owner text, p_fid int4, p_started int8, p_completed int8, p_app text,
    p_key text, p_answer text, p_output text, p_msg text)
RETURNS TABLE (o_written int8, o_output text, o_serialization text, o_own bool, o_extra int8)
LANGUAGE plpgsql AS $fn$
DECLARE r record;
BEGIN
    o_own := {s}.stead_own(p_id, p_owner);
    o_written := 0; o_extra := 0;
    IF o_own THEN
        r := {s}.stead_record(p_id, p_owner, p_fid, p_started, p_completed, p_app,
            'stead.update', p_output, 'portable_json');
        IF r.o_written THEN
            o_written := 1;
            UPDATE {s}.notifications SET consumed = true, consumed_by_function_id = p_fid
            WHERE message_uuid = p_msg AND destination_uuid = p_id;
            o_extra := {s}.stead_event(p_id, p_fid, p_key, p_answer, true);
        END IF;
    END IF;
    RETURN NEXT;
END
$fn$;
SELECT create_distributed_function('{s}.stead_op_accept_update(text, text, int4, int8, int8, text, text, text, text, text)', colocate_with := '{s}.workflow_status');

CREATE OR REPLACE FUNCTION {s}.stead_op_reject_update(
    p_id text, p_owner text, p_fid int4, p_started int8, p_completed int8, p_app text,
    p_key text, p_answer text, p_msg text)
RETURNS TABLE (o_written int8, o_output text, o_serialization text, o_own bool, o_extra int8)
LANGUAGE plpgsql AS $fn$
BEGIN
    o_own := {s}.stead_own(p_id, p_owner);
    o_written := 0; o_extra := 0;
    IF o_own THEN
        UPDATE {s}.notifications SET consumed = true
        WHERE message_uuid = p_msg AND destination_uuid = p_id AND NOT consumed;
        IF FOUND THEN
            o_written := 1;
            o_extra := {s}.stead_event(p_id, p_fid, p_key, p_answer, false);
        END IF;
    END IF;
    RETURN NEXT;
END
$fn$;
SELECT create_distributed_function('{s}.stead_op_reject_update(text, text, int4, int8, int8, text, text, text, text)', colocate_with := '{s}.workflow_status');

-- ops.rs, messages from outside a workflow (a client's send, signal-with-start): each written
-- once by its id.
CREATE OR REPLACE FUNCTION {s}.stead_send_bulk(
    p_id text[], p_dest text[], p_topic text[], p_message text[], p_created int8[])
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_id, 1), 0) LOOP
        INSERT INTO {s}.notifications (message_uuid, destination_uuid, topic, message,
            serialization, created_at_epoch_ms)
        VALUES (p_id[i], p_dest[i], p_topic[i], p_message[i], 'portable_json', p_created[i])
        ON CONFLICT (message_uuid) DO NOTHING;
    END LOOP;
END
$fn$;
SELECT create_distributed_function('{s}.stead_send_bulk(text[], text[], text[], text[], int8[])', colocate_with := '{s}.workflow_status');

-- manage.rs, a fork: workflow p_id copied as p_new (enqueued on p_queue, app version p_version
-- or the original's), with the original's calls, history, events and stream values before call
-- p_before; answers (the original exists, the copy was made, announced).
CREATE OR REPLACE FUNCTION {s}.stead_fork(
    p_id text, p_new text, p_queue text, p_version text, p_before int4, p_now int8)
RETURNS TABLE (o_exists int8, o_made int8, o_woken int8)
LANGUAGE plpgsql AS $fn$
DECLARE
    src {s}.workflow_status%ROWTYPE;
    r record;
BEGIN
    o_exists := 0; o_made := 0; o_woken := 0;
    SELECT * INTO src FROM {s}.workflow_status WHERE workflow_uuid = p_id;
    IF NOT FOUND THEN RETURN NEXT; RETURN; END IF;
    o_exists := 1;
    INSERT INTO {s}.workflow_status (
        workflow_uuid, status, name, class_name, config_name, queue_name, application_version,
        application_name, authenticated_user, assumed_role, authenticated_roles, serialization,
        forked_from, recovery_attempts, priority, created_at, updated_at, workflow_timeout_ms,
        inputs, attributes)
    VALUES (p_new, 'ENQUEUED', src.name, src.class_name, src.config_name, p_queue,
        coalesce(p_version, src.application_version), src.application_name,
        src.authenticated_user, src.assumed_role, src.authenticated_roles, src.serialization,
        p_id, 0, 0, p_now, p_now, src.workflow_timeout_ms, src.inputs, src.attributes)
    ON CONFLICT (workflow_uuid) DO NOTHING;
    IF NOT FOUND THEN RETURN NEXT; RETURN; END IF;
    o_made := 1;
    FOR r IN SELECT i.inputs FROM {s}.workflow_input i WHERE i.workflow_uuid = p_id LOOP
        INSERT INTO {s}.workflow_input (workflow_uuid, inputs) VALUES (p_new, r.inputs);
    END LOOP;
    FOR r IN SELECT * FROM {s}.operation_outputs o
             WHERE o.workflow_uuid = p_id AND o.function_id < p_before LOOP
        INSERT INTO {s}.operation_outputs (workflow_uuid, function_id, function_name, output,
            error, child_workflow_id, started_at_epoch_ms, completed_at_epoch_ms, serialization,
            application_name)
        VALUES (p_new, r.function_id, r.function_name, r.output, r.error, r.child_workflow_id,
            r.started_at_epoch_ms, r.completed_at_epoch_ms, r.serialization, r.application_name);
    END LOOP;
    FOR r IN SELECT * FROM {s}.workflow_events_history h
             WHERE h.workflow_uuid = p_id AND h.function_id < p_before LOOP
        INSERT INTO {s}.workflow_events_history (workflow_uuid, function_id, key, value,
            serialization)
        VALUES (p_new, r.function_id, r.key, r.value, r.serialization);
    END LOOP;
    FOR r IN SELECT DISTINCT ON (h.key) h.key, h.value, h.serialization
             FROM {s}.workflow_events_history h
             WHERE h.workflow_uuid = p_id AND h.function_id < p_before
             ORDER BY h.key, h.function_id DESC LOOP
        INSERT INTO {s}.workflow_events (workflow_uuid, key, value, serialization)
        VALUES (p_new, r.key, r.value, r.serialization);
    END LOOP;
    FOR r IN SELECT * FROM {s}.streams s
             WHERE s.workflow_uuid = p_id AND s.function_id < p_before LOOP
        INSERT INTO {s}.streams (workflow_uuid, key, value, "offset", function_id,
            serialization)
        VALUES (p_new, r.key, r.value, r."offset", r.function_id, r.serialization);
    END LOOP;
    UPDATE {s}.workflow_status SET was_forked_from = true WHERE workflow_uuid = p_id;
    PERFORM pg_notify('stead_queue_channel', p_queue);
    o_woken := 1;
    RETURN NEXT;
END
$fn$;
SELECT create_distributed_function('{s}.stead_fork(text, text, text, text, int4, int8)', colocate_with := '{s}.workflow_status');
