//! Every Postgres statement, with the schema spliced in once at startup; the templates live in
//! the concept modules beside the code that binds them. Private to the Postgres backend.

use std::sync::Arc;

use sqlx::{AssertSqlSafe, SqlStr};

use super::{
    cancel, claim, debounce, dispatch, finish, manage, migrate, observe, ops, queues, reads,
    retention, schedules, start, steps, versions,
};

pub(super) struct Sql {
    pub(super) schema: String,
    pub(super) start: SqlStr,
    pub(super) record_steps: SqlStr,
    pub(super) classify_steps: SqlStr,
    pub(super) finish: SqlStr,
    pub(super) classify_finish: SqlStr,
    pub(super) load_steps: SqlStr,
    pub(super) status: SqlStr,
    pub(super) recover: SqlStr,
    pub(super) claim: SqlStr,
    pub(super) claim_partitioned: SqlStr,
    pub(super) redispatch: SqlStr,
    pub(super) bump_attempts: SqlStr,
    pub(super) op_send: SqlStr,
    pub(super) op_recv: SqlStr,
    pub(super) op_set_event: SqlStr,
    pub(super) op_write_stream: SqlStr,
    pub(super) send: SqlStr,
    pub(super) get_event: SqlStr,
    pub(super) read_stream: SqlStr,
    pub(super) cancel: SqlStr,
    pub(super) list_asc: SqlStr,
    pub(super) list_desc: SqlStr,
    pub(super) steps: SqlStr,
    pub(super) resume: SqlStr,
    pub(super) fork: SqlStr,
    pub(super) delete_workflow: SqlStr,
    pub(super) set_delay: SqlStr,
    pub(super) register_version: SqlStr,
    pub(super) list_versions: SqlStr,
    pub(super) promote_version: SqlStr,
    pub(super) schema_version: SqlStr,
    pub(super) list_queues: SqlStr,
    pub(super) upsert_queue: SqlStr,
    pub(super) delete_queue: SqlStr,
    pub(super) list_schedules: SqlStr,
    pub(super) get_schedule: SqlStr,
    pub(super) put_schedule: SqlStr,
    pub(super) set_schedule_status: SqlStr,
    pub(super) delete_schedule: SqlStr,
    pub(super) fire_schedule: SqlStr,
    pub(super) debounce: SqlStr,
    pub(super) collect: SqlStr,
    pub(super) queue_counts: SqlStr,
    pub(super) throughput: SqlStr,
}

impl Sql {
    /// The statements of `schema`, a name `sysdb::validate_schema` accepted.
    pub(super) fn new(schema: &str) -> Sql {
        let q = |template: &str| -> SqlStr {
            let text: Arc<str> = template.replace("{s}", &format!("\"{schema}\"")).into();
            // Safe: the only spliced value is a schema name validated as a plain identifier.
            sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(text))
        };
        Sql {
            schema: schema.to_owned(),
            start: q(&start::statement()),
            record_steps: q(&steps::statement()),
            classify_steps: q(steps::CLASSIFY),
            finish: q(&finish::statement()),
            classify_finish: q(finish::CLASSIFY),
            load_steps: q(steps::LOAD),
            status: q(&reads::status_sql()),
            recover: q(dispatch::RECOVER),
            claim: q(&claim::claim_sql()),
            claim_partitioned: q(&claim::claim_partitioned_sql()),
            redispatch: q(dispatch::REDISPATCH),
            bump_attempts: q(dispatch::BUMP_ATTEMPTS),
            op_send: q(&ops::send_sql()),
            op_recv: q(&ops::recv_sql()),
            op_set_event: q(&ops::set_event_sql()),
            op_write_stream: q(&ops::write_stream_sql()),
            send: q(ops::SEND),
            get_event: q(reads::GET_EVENT),
            read_stream: q(reads::READ_STREAM),
            cancel: q(cancel::CANCEL),
            list_asc: q(&manage::list_sql(false)),
            list_desc: q(&manage::list_sql(true)),
            steps: q(manage::STEPS),
            resume: q(manage::RESUME),
            fork: q(manage::FORK),
            delete_workflow: q(manage::DELETE),
            set_delay: q(manage::SET_DELAY),
            register_version: q(versions::REGISTER),
            list_versions: q(versions::LIST),
            promote_version: q(versions::PROMOTE),
            schema_version: q(migrate::SCHEMA_VERSION),
            list_queues: q(&queues::list_sql()),
            upsert_queue: q(&queues::upsert_sql()),
            delete_queue: q(queues::DELETE),
            list_schedules: q(&schedules::list_sql()),
            get_schedule: q(&schedules::get_sql()),
            put_schedule: q(&schedules::put_sql()),
            set_schedule_status: q(schedules::SET_STATUS),
            delete_schedule: q(schedules::DELETE),
            fire_schedule: q(schedules::FIRE),
            debounce: q(debounce::BOUNCE),
            collect: q(retention::COLLECT),
            queue_counts: q(observe::QUEUE_COUNTS),
            throughput: q(observe::THROUGHPUT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_schema_qualified() {
        let sql = Sql::new("tenant_a");
        assert!(sql
            .record_steps
            .as_str()
            .contains("\"tenant_a\".operation_outputs"));
        for statement in [&sql.start, &sql.finish, &sql.claim, &sql.claim_partitioned] {
            assert!(!statement.as_str().contains("{s}"));
        }
    }
}
