-- W5's history: :n finished workflows with :steps steps each, written set-based into the
-- `dbos` schema of a migrated database (psql variables n, steps, batch; run by workloads.rs
-- `seed-history`). Bench data only, never runtime SQL. Rows look like stead's own: mostly
-- SUCCESS, some ERROR/CANCELLED/MAX_RECOVERY_ATTEMPTS_EXCEEDED, five app versions, eight
-- executors, a third queued on five queues, created_at spread over the last 180 days.
-- {lo} and {hi} are the batch's first and last workflow number (1-based).

WITH g AS (
    SELECT i,
           (extract(epoch FROM now()) * 1000)::int8 - 86400000::int8 * 180
               + (i::int8 * 15552000000 / {n}) AS created,
           hashint4(i) AS h
    FROM generate_series({lo}, {hi}) AS i
), rows AS (
    SELECT i, created, h,
           CASE WHEN abs(h) % 100 < 90 THEN 'SUCCESS'
                WHEN abs(h) % 100 < 96 THEN 'ERROR'
                WHEN abs(h) % 100 < 99 THEN 'CANCELLED'
                ELSE 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' END AS status
    FROM g
), ws AS (
    INSERT INTO dbos.workflow_status (
        workflow_uuid, status, name, executor_id, created_at, updated_at, application_version,
        application_id, recovery_attempts, queue_name, inputs, started_at_epoch_ms, priority,
        serialization, completed_at, application_name, owner_xid, rate_limited)
    SELECT 'h-' || md5(i::text), status,
           (ARRAY['checkout', 'refund', 'ship_order', 'send_mail', 'nightly_report', 'sync_crm',
                  'resize_image', 'approve_loan'])[1 + abs(h / 7) % 8],
           'exec-' || (abs(h / 11) % 8),
           created, created + 40 + abs(h) % 900,
           'v' || (1 + abs(h / 13) % 5) || '.0.' || (abs(h / 17) % 3),
           NULL, 1,
           CASE WHEN abs(h / 19) % 3 = 0 THEN 'q' || (abs(h / 23) % 5) END,
           NULL, created + 3, abs(h / 29) % 3,
           'portable_json', created + 40 + abs(h) % 900, NULL, NULL,
           false
    FROM rows
    RETURNING workflow_uuid, status, created_at, completed_at
), wi AS (
    INSERT INTO dbos.workflow_input (workflow_uuid, inputs, retention_timestamp)
    SELECT workflow_uuid,
           json_build_object('args', json_build_array(json_build_object(
               'order_id', workflow_uuid, 'customer', 'cust-' || left(workflow_uuid, 8),
               'amount_cents', length(workflow_uuid) * 137, 'note', repeat('x', 96))),
               'kwargs', json_build_object())::text,
           created_at
    FROM ws
), wo AS (
    INSERT INTO dbos.workflow_output (workflow_uuid, output, error, retention_timestamp)
    SELECT workflow_uuid,
           CASE WHEN status = 'SUCCESS' THEN json_build_object('ok', true, 'receipt',
               md5(workflow_uuid || 'r'), 'lines', 3, 'memo', repeat('y', 64))::text END,
           CASE WHEN status = 'ERROR' THEN json_build_object('name', 'PaymentDeclined',
               'message', 'card declined for ' || workflow_uuid || ' ' || repeat('z', 48))::text
                WHEN status = 'CANCELLED' THEN json_build_object('name', 'Cancelled',
               'message', 'cancelled by operator')::text END,
           completed_at
    FROM ws WHERE status <> 'MAX_RECOVERY_ATTEMPTS_EXCEEDED'
)
INSERT INTO dbos.operation_outputs (
    workflow_uuid, function_id, function_name, output, error, started_at_epoch_ms,
    completed_at_epoch_ms, serialization, retention_timestamp)
SELECT ws.workflow_uuid, s,
       (ARRAY['charge_card', 'reserve_stock', 'write_ledger', 'call_api', 'render_pdf'])[1 + s % 5],
       json_build_object('step', s, 'value', md5(ws.workflow_uuid || s), 'pad', repeat('p', 40))::text,
       NULL, ws.created_at + s * 4, ws.created_at + s * 4 + 3, 'portable_json', ws.completed_at
FROM ws, generate_series(1, {steps}) AS s;
