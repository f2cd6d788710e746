-- One enqueue's rows as DBOS lays them out (the status row and its input), in one statement:
-- the least any engine on this schema writes per durable enqueue.
WITH s AS (
    INSERT INTO dbos.workflow_status (workflow_uuid, status, name, queue_name, priority,
        recovery_attempts, serialization, created_at, updated_at, application_version)
    VALUES (gen_random_uuid()::text, 'ENQUEUED', 'work', 'benchq', 0, 0, 'portable_json',
        (extract(epoch FROM now()) * 1000)::int8, (extract(epoch FROM now()) * 1000)::int8,
        'bench-1')
    RETURNING workflow_uuid
)
INSERT INTO dbos.workflow_input (workflow_uuid, inputs, retention_timestamp)
SELECT workflow_uuid, '{"positionalArgs":[1],"namedArgs":{}}', 0 FROM s;
