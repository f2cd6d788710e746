//! Durable calls with a side effect that must commit together with their record: sending a
//! message, receiving one, setting an event, writing to a stream. Each is one statement that
//! writes the effect only when it also writes the call's row in `operation_outputs` (and only
//! while the workflow is `PENDING` under the caller's owner token), so a retry or a replay never
//! repeats the effect.
//!
//! They share the database actor's "ops" lane: one connection, the calls of a flush run one
//! after another.

use futures::future::BoxFuture;
use sqlx::postgres::PgConnection;
use sqlx::Row;

use super::batch::BatchWrite;
use super::steps::{classify_one, StepOutcome};
use super::Sql;
use super::{sqlite, Backend, SysDb};
use crate::error::DbError;

/// The durable call an op records.
#[derive(Debug, Clone)]
pub(crate) struct OpStep {
    pub workflow_id: String,
    pub owner: String,
    pub function_id: u32,
    pub started_at: i64,
    pub app_name: Option<String>,
}

/// A durable call with an effect.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// `DBOS.send`: a message to `destination`, with a message id fixed by the call.
    Send {
        step: OpStep,
        destination: String,
        topic: String,
        message: String,
    },
    /// `DBOS.recv`: consume the oldest unconsumed message of `topic`; with `give_up`, record
    /// `null` when there is none (the wait timed out).
    Recv {
        step: OpStep,
        topic: String,
        give_up: bool,
    },
    /// `DBOS.setEvent`: the latest value of `key`, plus a history row.
    SetEvent {
        step: OpStep,
        key: String,
        value: String,
    },
    /// `DBOS.writeStream` / `DBOS.closeStream`: the next value of stream `key`.
    WriteStream {
        step: OpStep,
        key: String,
        value: String,
        close: bool,
    },
}

/// What an op found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum OpOutcome {
    /// Done now; `output` is what was recorded (for a receive: the message, or `null`).
    Done {
        output: Option<String>,
        serialization: Option<String>,
    },
    /// A receive found no message (and was not told to give up): nothing was written.
    Nothing,
    /// Recorded before, by an earlier attempt or execution: its values stand.
    AlreadyRecorded {
        output: Option<String>,
        error: Option<String>,
    },
    Cancelled,
    NotOwner,
}

const OWN: &str = "own AS (SELECT 1 FROM {s}.workflow_status \
    WHERE workflow_uuid = $1 AND status = 'PENDING' AND owner_xid = $2)";

/// Records the call ($1 workflow, $3 function id, $4/$5 started/completed, $6 app) as `name`
/// with `output`, when the workflow is ours and the call has no row yet.
fn record(name: &str, output: &str, serialization: &str, condition: &str) -> String {
    format!(
        "step AS (INSERT INTO {{s}}.operation_outputs (workflow_uuid, function_id, function_name, \
         output, serialization, started_at_epoch_ms, completed_at_epoch_ms, application_name) \
         SELECT $1, $3, {name}, {output}, {serialization}, $4, $5, $6 \
         WHERE EXISTS (SELECT 1 FROM own){condition} \
         ON CONFLICT (workflow_uuid, function_id) DO NOTHING RETURNING output, serialization)"
    )
}

pub(super) fn send_sql() -> String {
    format!(
        "WITH {OWN}, {}, msg AS (INSERT INTO {{s}}.notifications \
         (message_uuid, destination_uuid, topic, message, serialization) \
         SELECT $7, $8, $9, $10, 'portable_json' WHERE EXISTS (SELECT 1 FROM step) \
         ON CONFLICT (message_uuid) DO NOTHING RETURNING 1) \
         SELECT (SELECT count(*) FROM step), NULL::text, NULL::text, \
                EXISTS (SELECT 1 FROM own), (SELECT count(*) FROM msg)",
        record("'DBOS.send'", "'null'", "'portable_json'", "")
    )
}

pub(super) fn recv_sql() -> String {
    format!(
        "WITH {OWN}, done AS (SELECT 1 FROM {{s}}.operation_outputs \
           WHERE workflow_uuid = $1 AND function_id = $3), \
         m AS (SELECT message_uuid FROM {{s}}.notifications \
           WHERE destination_uuid = $1 AND topic = $7 AND NOT consumed \
             AND EXISTS (SELECT 1 FROM own) AND NOT EXISTS (SELECT 1 FROM done) \
           ORDER BY created_at_epoch_ms, message_uuid LIMIT 1 FOR UPDATE SKIP LOCKED), \
         taken AS (UPDATE {{s}}.notifications n SET consumed = true, consumed_by_function_id = $3 \
           FROM m WHERE n.message_uuid = m.message_uuid RETURNING n.message, n.serialization), \
         {} \
         SELECT (SELECT count(*) FROM step), (SELECT output FROM step), \
                (SELECT serialization FROM step), EXISTS (SELECT 1 FROM own), \
                (SELECT count(*) FROM done)",
        record(
            "'DBOS.recv'",
            "COALESCE((SELECT message FROM taken), 'null')",
            "COALESCE((SELECT serialization FROM taken), 'portable_json')",
            " AND (EXISTS (SELECT 1 FROM taken) OR $8)"
        )
    )
}

pub(super) fn set_event_sql() -> String {
    format!(
        "WITH {OWN}, {}, \
         ev AS (INSERT INTO {{s}}.workflow_events (workflow_uuid, key, value, serialization) \
           SELECT $1, $7, $8, 'portable_json' WHERE EXISTS (SELECT 1 FROM step) \
           ON CONFLICT (workflow_uuid, key) \
           DO UPDATE SET value = EXCLUDED.value, serialization = EXCLUDED.serialization \
           RETURNING 1), \
         hist AS (INSERT INTO {{s}}.workflow_events_history \
           (workflow_uuid, function_id, key, value, serialization) \
           SELECT $1, $3, $7, $8, 'portable_json' WHERE EXISTS (SELECT 1 FROM step) \
           ON CONFLICT (workflow_uuid, function_id, key) DO NOTHING RETURNING 1), \
         note AS (SELECT pg_notify('dbos_workflow_events_channel', $1 || '::' || $7) \
           WHERE EXISTS (SELECT 1 FROM ev)) \
         SELECT (SELECT count(*) FROM step), NULL::text, NULL::text, \
                EXISTS (SELECT 1 FROM own), (SELECT count(*) FROM note)",
        record("'DBOS.setEvent'", "'null'", "'portable_json'", "")
    )
}

pub(super) fn write_stream_sql() -> String {
    format!(
        "WITH {OWN}, {}, \
         ins AS (INSERT INTO {{s}}.streams \
           (workflow_uuid, key, value, \"offset\", function_id, serialization) \
           SELECT $1, $7, $8, COALESCE((SELECT max(\"offset\") + 1 FROM {{s}}.streams \
             WHERE workflow_uuid = $1 AND key = $7), 0), $3, 'portable_json' \
           WHERE EXISTS (SELECT 1 FROM step) RETURNING 1), \
         note AS (SELECT pg_notify('dbos_streams_channel', $1 || '::' || $7) \
           WHERE EXISTS (SELECT 1 FROM ins)) \
         SELECT (SELECT count(*) FROM step), NULL::text, NULL::text, \
                EXISTS (SELECT 1 FROM own), (SELECT count(*) FROM note)",
        record("$9", "'null'", "'portable_json'", "")
    )
}

impl Op {
    pub(crate) fn step(&self) -> &OpStep {
        match self {
            Op::Send { step, .. }
            | Op::Recv { step, .. }
            | Op::SetEvent { step, .. }
            | Op::WriteStream { step, .. } => step,
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Send { .. } => "DBOS.send",
            Op::Recv { .. } => "DBOS.recv",
            Op::SetEvent { .. } => "DBOS.setEvent",
            Op::WriteStream { close: false, .. } => "DBOS.writeStream",
            Op::WriteStream { close: true, .. } => "DBOS.closeStream",
        }
    }

    async fn run(&self, sql: &Sql, conn: &mut PgConnection) -> Result<OpOutcome, DbError> {
        let s = self.step();
        let statement = match self {
            Op::Send { .. } => &sql.op_send,
            Op::Recv { .. } => &sql.op_recv,
            Op::SetEvent { .. } => &sql.op_set_event,
            Op::WriteStream { .. } => &sql.op_write_stream,
        };
        let q = sqlx::query(statement.clone())
            .bind(&s.workflow_id)
            .bind(&s.owner)
            .bind(s.function_id as i32)
            .bind(s.started_at)
            .bind(super::now_ms())
            .bind(&s.app_name);
        let q = match self {
            Op::Send {
                destination,
                topic,
                message,
                ..
            } => q
                .bind(format!("{}-{}", s.workflow_id, s.function_id))
                .bind(destination)
                .bind(topic)
                .bind(message),
            Op::Recv { topic, give_up, .. } => q.bind(topic).bind(*give_up),
            Op::SetEvent { key, value, .. } => q.bind(key).bind(value),
            Op::WriteStream { key, value, .. } => q.bind(key).bind(value).bind(self.name()),
        };
        let row = q.fetch_one(&mut *conn).await?;
        let written: i64 = row.try_get(0)?;
        let own: bool = row.try_get(3)?;
        if written > 0 {
            return Ok(OpOutcome::Done {
                output: row.try_get(1)?,
                serialization: row.try_get(2)?,
            });
        }
        if let Op::Recv { .. } = self {
            let done: i64 = row.try_get(4)?;
            if own && done == 0 {
                return Ok(OpOutcome::Nothing);
            }
        }
        Ok(
            match classify_one(sql, conn, &s.workflow_id, s.function_id, self.name()).await? {
                StepOutcome::AlreadyRecorded { output, error } => {
                    OpOutcome::AlreadyRecorded { output, error }
                }
                StepOutcome::Cancelled => OpOutcome::Cancelled,
                StepOutcome::Recorded | StepOutcome::NotOwner => OpOutcome::NotOwner,
            },
        )
    }
}

impl BatchWrite for Op {
    type Out = OpOutcome;
    const LANE: &'static str = "ops";

    fn execute<'a>(
        sql: &'a Sql,
        conn: &'a mut PgConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<OpOutcome>, DbError>> {
        Box::pin(async move {
            let mut outs = Vec::with_capacity(batch.len());
            for op in batch {
                outs.push(op.run(sql, conn).await?);
            }
            Ok(outs)
        })
    }

    fn execute_lite<'a>(
        tx: &'a mut sqlx::sqlite::SqliteConnection,
        batch: &'a [Self],
    ) -> BoxFuture<'a, Result<Vec<OpOutcome>, DbError>> {
        Box::pin(super::sqlite::ops::execute(tx, batch))
    }
}

pub(super) const SEND: &str = "INSERT INTO {s}.notifications \
    (message_uuid, destination_uuid, topic, message, serialization) \
    VALUES ($1, $2, $3, $4, 'portable_json') ON CONFLICT (message_uuid) DO NOTHING";

/// Sends a message from outside a workflow; `message_id` makes a resend a no-op.
pub(crate) async fn send(
    db: &SysDb,
    message_id: &str,
    destination: &str,
    topic: &str,
    message: &str,
) -> Result<(), DbError> {
    match &db.backend {
        Backend::Postgres { pool, .. } => {
            send_pg(pool, &db.sql, message_id, destination, topic, message).await
        }
        Backend::Sqlite(lite) => {
            sqlite::ops::send(lite, message_id, destination, topic, message).await
        }
    }
}

async fn send_pg(
    pool: &sqlx::PgPool,
    sql: &Sql,
    message_id: &str,
    destination: &str,
    topic: &str,
    message: &str,
) -> Result<(), DbError> {
    sqlx::query(sql.send.clone())
        .bind(message_id)
        .bind(destination)
        .bind(topic)
        .bind(message)
        .execute(pool)
        .await?;
    Ok(())
}
