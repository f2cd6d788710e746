//! Durable calls with an effect on SQLite (send, receive, set an event, write a stream): the
//! effect is written only when the call's row in `operation_outputs` is, both inside the flush's
//! one write transaction and only while the workflow is `PENDING` under the caller's owner
//! token, so a retry or a replay never repeats the effect.
//!
//! No NOTIFY: the callers wake this process's waiters themselves after the write.

use async_trait::async_trait;
use sqlx::sqlite::SqliteConnection;
use sqlx::Row;

use super::steps::classify;
use super::Sqlite;
use crate::base::clock::now_ms;
use crate::base::codec::PORTABLE_JSON;
use crate::error::DbError;
use crate::sysdb::ops::{Messages, OutgoingMessage, PeekedMessage};
use crate::sysdb::{next_created_at, Op, OpOutcome, OpStep, UPDATE_CALL};

/// Records call `function_id` with `output`, when the workflow is ours and the call has no row.
const RECORD: &str = "INSERT INTO operation_outputs (workflow_uuid, function_id, function_name, \
        output, serialization, started_at_epoch_ms, completed_at_epoch_ms, application_name, \
        retention_timestamp) \
    SELECT ?1, ?3, ?7, ?8, ?9, ?4, ?5, ?6, ?5 FROM workflow_status \
    WHERE workflow_uuid = ?1 AND status = 'PENDING' AND owner_xid = ?2 \
    ON CONFLICT (workflow_uuid, function_id) DO NOTHING";

const RECV: &str = "DBOS.recv";

const SEND: &str = "INSERT INTO notifications \
    (message_uuid, destination_uuid, topic, message, serialization, created_at_epoch_ms) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (message_uuid) DO NOTHING";

#[async_trait]
impl Messages for Sqlite {
    async fn send_bulk(&self, messages: &[OutgoingMessage]) -> Result<(), DbError> {
        let mut tx = self.write().await?;
        for m in messages {
            insert_message(&mut tx, m).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn peek_message(
        &self,
        destination: &str,
        topic: &str,
    ) -> Result<Option<PeekedMessage>, DbError> {
        let row = sqlx::query(
            "SELECT message_uuid, message, serialization FROM notifications \
             WHERE destination_uuid = ?1 AND topic = ?2 AND NOT consumed \
             ORDER BY created_at_epoch_ms, message_uuid LIMIT 1",
        )
        .bind(destination)
        .bind(topic)
        .fetch_optional(self.reader())
        .await?;
        Ok(row.map(|r| PeekedMessage::from_row(&r)).transpose()?)
    }
}

/// The message row; a missing destination fails with `MissingReference`, as the foreign key
/// does on Postgres.
pub(super) async fn insert_message(
    tx: &mut SqliteConnection,
    m: &OutgoingMessage,
) -> Result<(), DbError> {
    let exists = sqlx::query("SELECT 1 FROM workflow_status WHERE workflow_uuid = ?1")
        .bind(&m.destination)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
    if !exists {
        return Err(DbError::MissingReference {
            constraint: "notifications_destination_uuid_fkey".into(),
        });
    }
    sqlx::query(SEND)
        .bind(&m.id)
        .bind(&m.destination)
        .bind(&m.topic)
        .bind(&m.message)
        .bind(PORTABLE_JSON)
        .bind(m.created_at)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Runs the batch's ops one after another; one outcome per op, in order.
pub(super) async fn run_all(
    tx: &mut SqliteConnection,
    batch: &[&Op],
) -> Result<Vec<OpOutcome>, DbError> {
    let mut outcomes = Vec::with_capacity(batch.len());
    for op in batch {
        outcomes.push(run(tx, op).await?);
    }
    Ok(outcomes)
}

async fn run(tx: &mut SqliteConnection, op: &Op) -> Result<OpOutcome, DbError> {
    match op {
        Op::Recv {
            step,
            topic,
            give_up,
        } => return recv(tx, step, topic, *give_up).await,
        Op::RejectUpdate {
            step,
            message_id,
            key,
            value,
        } => return reject_update(tx, step, message_id, key, value).await,
        _ => {}
    }
    let step = op.step();
    let output = match op {
        Op::AcceptUpdate { output, .. } => output.as_str(),
        _ => "null",
    };
    if !record(tx, step, op.name(), output, PORTABLE_JSON).await? {
        return unwritten(tx, step, op.name()).await;
    }
    match op {
        Op::Send {
            destination,
            topic,
            message,
            ..
        } => {
            // Stamped in process order: the default has second resolution, and receives go
            // oldest first.
            let m = OutgoingMessage {
                id: Op::message_id(step),
                destination: destination.clone(),
                topic: topic.clone(),
                message: message.clone(),
                created_at: next_created_at(),
            };
            insert_message(tx, &m).await?;
        }
        Op::SetEvent { key, value, .. } => set_event(tx, step, key, value, true).await?,
        Op::WriteStream { key, value, .. } => write_stream(tx, step, key, value).await?,
        Op::AcceptUpdate {
            message_id,
            key,
            value,
            ..
        } => {
            consume(tx, step, message_id, Some(step.function_id)).await?;
            set_event(tx, step, key, value, true).await?
        }
        Op::Recv { .. } | Op::RejectUpdate { .. } => {}
    }
    Ok(OpOutcome::Done {
        output: None,
        serialization: None,
    })
}

/// Writes the call's row; false when it was not written (not ours, or recorded before).
async fn record(
    tx: &mut SqliteConnection,
    step: &OpStep,
    name: &str,
    output: &str,
    serialization: &str,
) -> Result<bool, DbError> {
    Ok(sqlx::query(RECORD)
        .bind(&step.workflow_id)
        .bind(&step.owner)
        .bind(step.function_id as i64)
        .bind(step.started_at)
        .bind(now_ms())
        .bind(&step.app_name)
        .bind(name)
        .bind(output)
        .bind(serialization)
        .execute(&mut *tx)
        .await?
        .rows_affected()
        == 1)
}

/// Why the row of call `name` was not written.
async fn unwritten(
    tx: &mut SqliteConnection,
    step: &OpStep,
    name: &str,
) -> Result<OpOutcome, DbError> {
    let found = classify(tx, &step.workflow_id, &step.owner, step.function_id, name).await?;
    Ok(found.into())
}

/// Takes the oldest unconsumed message of `topic` and records it; with none, records `null`
/// when `give_up`, else writes nothing.
async fn recv(
    tx: &mut SqliteConnection,
    step: &OpStep,
    topic: &str,
    give_up: bool,
) -> Result<OpOutcome, DbError> {
    let probe = sqlx::query(
        "SELECT EXISTS (SELECT 1 FROM workflow_status \
             WHERE workflow_uuid = ?1 AND status = 'PENDING' AND owner_xid = ?2), \
         EXISTS (SELECT 1 FROM operation_outputs WHERE workflow_uuid = ?1 AND function_id = ?3)",
    )
    .bind(&step.workflow_id)
    .bind(&step.owner)
    .bind(step.function_id as i64)
    .fetch_one(&mut *tx)
    .await?;
    let (own, done): (bool, bool) = (probe.try_get(0)?, probe.try_get(1)?);
    if !own || done {
        return unwritten(tx, step, RECV).await;
    }
    let taken = sqlx::query(
        "UPDATE notifications SET consumed = 1, consumed_by_function_id = ?3 \
         WHERE message_uuid = (SELECT message_uuid FROM notifications \
             WHERE destination_uuid = ?1 AND topic = ?2 AND NOT consumed \
             ORDER BY created_at_epoch_ms, message_uuid LIMIT 1) \
         RETURNING message, serialization",
    )
    .bind(&step.workflow_id)
    .bind(topic)
    .bind(step.function_id as i64)
    .fetch_optional(&mut *tx)
    .await?;
    let (output, serialization) = match taken {
        Some(row) => (
            row.try_get::<String, _>(0)?,
            row.try_get::<Option<String>, _>(1)?
                .unwrap_or_else(|| PORTABLE_JSON.to_owned()),
        ),
        None if give_up => ("null".to_owned(), PORTABLE_JSON.to_owned()),
        None => return Ok(OpOutcome::Nothing),
    };
    if !record(tx, step, RECV, &output, &serialization).await? {
        return unwritten(tx, step, RECV).await;
    }
    Ok(OpOutcome::Done {
        output: Some(output),
        serialization: Some(serialization),
    })
}

/// Consumes request message `message_id` (if still unconsumed), by call `function_id` if any;
/// false when it was consumed already.
async fn consume(
    tx: &mut SqliteConnection,
    step: &OpStep,
    message_id: &str,
    function_id: Option<u32>,
) -> Result<bool, DbError> {
    Ok(sqlx::query(
        "UPDATE notifications SET consumed = 1, consumed_by_function_id = ?3 \
         WHERE message_uuid = ?1 AND destination_uuid = ?2 AND NOT consumed",
    )
    .bind(message_id)
    .bind(&step.workflow_id)
    .bind(function_id.map(i64::from))
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1)
}

/// A validator's rejection: the request consumed and the answer set, no call recorded. A
/// request consumed already was rejected by an earlier attempt of this flush.
async fn reject_update(
    tx: &mut SqliteConnection,
    step: &OpStep,
    message_id: &str,
    key: &str,
    value: &str,
) -> Result<OpOutcome, DbError> {
    let own = sqlx::query(
        "SELECT 1 FROM workflow_status \
         WHERE workflow_uuid = ?1 AND status = 'PENDING' AND owner_xid = ?2",
    )
    .bind(&step.workflow_id)
    .bind(&step.owner)
    .fetch_optional(&mut *tx)
    .await?
    .is_some();
    if !own {
        return unwritten(tx, step, UPDATE_CALL).await;
    }
    if consume(tx, step, message_id, None).await? {
        set_event(tx, step, key, value, false).await?;
    }
    Ok(OpOutcome::Done {
        output: None,
        serialization: None,
    })
}

/// The event's latest value and, with `history`, its history row.
async fn set_event(
    tx: &mut SqliteConnection,
    step: &OpStep,
    key: &str,
    value: &str,
    history: bool,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO workflow_events (workflow_uuid, key, value, serialization) \
         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (workflow_uuid, key) \
         DO UPDATE SET value = excluded.value, serialization = excluded.serialization",
    )
    .bind(&step.workflow_id)
    .bind(key)
    .bind(value)
    .bind(PORTABLE_JSON)
    .execute(&mut *tx)
    .await?;
    if !history {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO workflow_events_history (workflow_uuid, function_id, key, value, \
             serialization) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (workflow_uuid, function_id, key) DO NOTHING",
    )
    .bind(&step.workflow_id)
    .bind(step.function_id as i64)
    .bind(key)
    .bind(value)
    .bind(PORTABLE_JSON)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The stream's next value, at the offset after its last.
async fn write_stream(
    tx: &mut SqliteConnection,
    step: &OpStep,
    key: &str,
    value: &str,
) -> Result<(), DbError> {
    sqlx::query(
        "INSERT INTO streams (workflow_uuid, key, value, \"offset\", function_id, serialization) \
         SELECT ?1, ?2, ?3, COALESCE(max(\"offset\") + 1, 0), ?4, ?5 FROM streams \
         WHERE workflow_uuid = ?1 AND key = ?2",
    )
    .bind(&step.workflow_id)
    .bind(key)
    .bind(value)
    .bind(step.function_id as i64)
    .bind(PORTABLE_JSON)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
