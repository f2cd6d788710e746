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
