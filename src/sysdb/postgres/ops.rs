//! Durable calls with an effect on Postgres: each is one statement that writes the effect only
//! when it also writes the call's row (and only while the workflow is `PENDING` under the
//! caller's owner token), and announces it on DBOS's channels. A flush's ops run one after
//! another on the lane's connection.

use std::sync::LazyLock;

use async_trait::async_trait;
use sqlx::postgres::PgConnection;
use sqlx::Row;

use super::exec::Stmt;
use super::route::Router;
use super::sql::Sql;
use super::steps::classify_one;
use super::Postgres;
use crate::base::clock::now_ms;
use crate::error::DbError;
use crate::sysdb::ops::{Messages, OutgoingMessage, PeekedMessage};
use crate::sysdb::{Op, OpOutcome, StepOutcome, StepWrite};

/// Built once per process; `Sql::get` splices the schema in.
static OP_WRITE_STREAM: LazyLock<String> = LazyLock::new(write_stream_sql);

/// Built once per process; `Sql::get` splices the schema in.
static OP_SET_EVENT: LazyLock<String> = LazyLock::new(set_event_sql);

/// Built once per process; `Sql::get` splices the schema in.
pub(super) static OP_RECV: LazyLock<String> = LazyLock::new(recv_sql);

/// Built once per process; `Sql::get` splices the schema in.
static OP_SEND: LazyLock<String> = LazyLock::new(send_sql);

/// Built once per process; `Sql::get` splices the schema in.
static OP_ACCEPT_UPDATE: LazyLock<String> = LazyLock::new(accept_update_sql);

/// Built once per process; `Sql::get` splices the schema in.
static OP_REJECT_UPDATE: LazyLock<String> = LazyLock::new(reject_update_sql);

/// Not `status = 'PENDING'`: a lane plans once, often on an empty table, and that form lets the
/// partial index of PENDING rows win, a scan of every running workflow per op once they are
/// many. This form leaves only the primary key.
const OWN: &str = "own AS (SELECT 1 FROM {s}.workflow_status \
    WHERE workflow_uuid = $1 AND status IS NOT DISTINCT FROM 'PENDING' AND owner_xid = $2)";

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

fn send_sql() -> String {
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

fn recv_sql() -> String {
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

/// Sets event $7 of workflow $1 to $8 once CTE `gate` wrote a row (`ev`), announcing it
/// (`note`); with `history`, also the history row of call $3 (`hist`).
fn event(gate: &str, history: bool) -> String {
    let hist = if history {
        format!(
            ", hist AS (INSERT INTO {{s}}.workflow_events_history \
               (workflow_uuid, function_id, key, value, serialization) \
               SELECT $1, $3, $7, $8, 'portable_json' WHERE EXISTS (SELECT 1 FROM {gate}) \
               ON CONFLICT (workflow_uuid, function_id, key) DO NOTHING RETURNING 1)"
        )
    } else {
        String::new()
    };
    format!(
        "ev AS (INSERT INTO {{s}}.workflow_events (workflow_uuid, key, value, serialization) \
           SELECT $1, $7, $8, 'portable_json' WHERE EXISTS (SELECT 1 FROM {gate}) \
           ON CONFLICT (workflow_uuid, key) \
           DO UPDATE SET value = EXCLUDED.value, serialization = EXCLUDED.serialization \
           RETURNING 1){hist}, \
         note AS (SELECT pg_notify('dbos_workflow_events_channel', $1 || '::' || $7)::text \
           WHERE EXISTS (SELECT 1 FROM ev))"
    )
}

/// The answer row: whether `gate` wrote, no output, ownership, announcements.
fn answer(gate: &str) -> String {
    format!(
        "SELECT (SELECT count(*) FROM {gate}), NULL::text, NULL::text, \
                EXISTS (SELECT 1 FROM own), (SELECT count(*) FROM note)"
    )
}

fn set_event_sql() -> String {
    format!(
        "WITH {OWN}, {}, {} {}",
        record("'DBOS.setEvent'", "'null'", "'portable_json'", ""),
        event("step", true),
        answer("step")
    )
}

/// $7 answer key, $8 answer, $9 recorded output, $10 the request's message id.
fn accept_update_sql() -> String {
    format!(
        "WITH {OWN}, {}, \
         taken AS (UPDATE {{s}}.notifications SET consumed = true, consumed_by_function_id = $3 \
           WHERE message_uuid = $10 AND destination_uuid = $1 AND EXISTS (SELECT 1 FROM step) \
           RETURNING 1), {} {}",
        record("'stead.update'", "$9", "'portable_json'", ""),
        event("step", true),
        answer("step")
    )
}

/// $7 answer key, $8 answer, $9 the request's message id; no call is recorded.
fn reject_update_sql() -> String {
    format!(
        "WITH {OWN}, \
         taken AS (UPDATE {{s}}.notifications SET consumed = true \
           WHERE message_uuid = $9 AND destination_uuid = $1 AND NOT consumed \
             AND EXISTS (SELECT 1 FROM own) RETURNING 1), {} {}",
        event("taken", false),
        answer("taken")
    )
}

fn write_stream_sql() -> String {
    format!(
        "WITH {OWN}, {}, \
         ins AS (INSERT INTO {{s}}.streams \
           (workflow_uuid, key, value, \"offset\", function_id, serialization) \
           SELECT $1, $7, $8, COALESCE((SELECT max(\"offset\") + 1 FROM {{s}}.streams \
             WHERE workflow_uuid = $1 AND key = $7), 0), $3, 'portable_json' \
           WHERE EXISTS (SELECT 1 FROM step) RETURNING 1), \
         note AS (SELECT pg_notify('dbos_streams_channel', $1 || '::' || $7)::text \
           WHERE EXISTS (SELECT 1 FROM ins)) \
         SELECT (SELECT count(*) FROM step), NULL::text, NULL::text, \
                EXISTS (SELECT 1 FROM own), (SELECT count(*) FROM note)",
        record("$9", "'null'", "'portable_json'", "")
    )
}

/// The ops' Citus forms (`migrations/postgres/citus.sql`): the same parameters and answer.
pub(super) const CITUS_SEND: &str =
    "SELECT * FROM {s}.stead_op_send($1::text, $2::text, $3::int4, \
    $4::int8, $5::int8, $6::text, $7::text, $8::text, $9::text, $10::text)";
pub(super) const CITUS_RECV: &str =
    "SELECT * FROM {s}.stead_op_recv($1::text, $2::text, $3::int4, \
    $4::int8, $5::int8, $6::text, $7::text, $8::bool)";
pub(super) const CITUS_SET_EVENT: &str =
    "SELECT * FROM {s}.stead_op_set_event($1::text, $2::text, \
    $3::int4, $4::int8, $5::int8, $6::text, $7::text, $8::text)";
const CITUS_WRITE_STREAM: &str = "SELECT * FROM {s}.stead_op_write_stream($1::text, $2::text, \
    $3::int4, $4::int8, $5::int8, $6::text, $7::text, $8::text, $9::text)";
const CITUS_ACCEPT_UPDATE: &str = "SELECT * FROM {s}.stead_op_accept_update($1::text, $2::text, \
    $3::int4, $4::int8, $5::int8, $6::text, $7::text, $8::text, $9::text, $10::text)";
const CITUS_REJECT_UPDATE: &str = "SELECT * FROM {s}.stead_op_reject_update($1::text, $2::text, \
    $3::int4, $4::int8, $5::int8, $6::text, $7::text, $8::text, $9::text)";

/// Runs one op: the effect and its record in one statement.
pub(super) async fn run(sql: &Sql, conn: &mut PgConnection, op: &Op) -> Result<OpOutcome, DbError> {
    let s = op.step();
    let statement = match op {
        Op::Send { .. } => sql.dialect(&OP_SEND, CITUS_SEND),
        Op::Recv { .. } => sql.dialect(&OP_RECV, CITUS_RECV),
        Op::SetEvent { .. } => sql.dialect(&OP_SET_EVENT, CITUS_SET_EVENT),
        Op::WriteStream { .. } => sql.dialect(&OP_WRITE_STREAM, CITUS_WRITE_STREAM),
        Op::AcceptUpdate { .. } => sql.dialect(&OP_ACCEPT_UPDATE, CITUS_ACCEPT_UPDATE),
        Op::RejectUpdate { .. } => sql.dialect(&OP_REJECT_UPDATE, CITUS_REJECT_UPDATE),
    };
    let q = sql
        .query(statement)
        .bind(&s.workflow_id)
        .bind(&s.owner)
        .bind(s.function_id as i32)
        .bind(s.started_at)
        .bind(now_ms())
        .bind(&s.app_name);
    let q = match op {
        Op::Send {
            destination,
            topic,
            message,
            ..
        } => q
            .bind(Op::message_id(s))
            .bind(destination)
            .bind(topic)
            .bind(message),
        Op::Recv { topic, give_up, .. } => q.bind(topic).bind(*give_up),
        Op::SetEvent { key, value, .. } => q.bind(key).bind(value),
        Op::WriteStream { key, value, .. } => q.bind(key).bind(value).bind(op.name()),
        Op::AcceptUpdate {
            message_id,
            output,
            key,
            value,
            ..
        } => q.bind(key).bind(value).bind(output).bind(message_id),
        Op::RejectUpdate {
            message_id,
            key,
            value,
            ..
        } => q.bind(key).bind(value).bind(message_id),
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
    // A rejection found its message consumed already: an earlier attempt of this flush.
    if let (Op::RejectUpdate { .. }, true) = (op, own) {
        return Ok(OpOutcome::Done {
            output: None,
            serialization: None,
        });
    }
    if let Op::Recv { .. } = op {
        let done: i64 = row.try_get(4)?;
        if own && done == 0 {
            return Ok(OpOutcome::Nothing);
        }
    }
    let found = classify_one(
        sql,
        conn,
        &s.workflow_id,
        &s.owner,
        s.function_id,
        op.name(),
    )
    .await?;
    Ok(found.into())
}

/// Runs one op on a sharded layout, in the bucket of its workflow; a send to a workflow in
/// another bucket goes as [`send_across`].
pub(super) async fn run_sharded(
    router: &Router,
    conn: &mut PgConnection,
    op: &Op,
) -> Result<OpOutcome, DbError> {
    let s = op.step();
    let own = router.locate(&s.workflow_id).await?;
    if let Op::Send { destination, .. } = op {
        let dest = router.locate(destination).await?;
        if dest != own {
            let (from, to) = (router.shards.bucket(own), router.shards.bucket(dest));
            return send_across(&from, &to, conn, op).await;
        }
    }
    run(&router.shards.bucket(own), conn, op).await
}

/// Whether workflow $1 is `PENDING` under owner token $2.
const OWNS: &str = "SELECT EXISTS (SELECT 1 FROM {s}.workflow_status \
    WHERE workflow_uuid = $1 AND status = 'PENDING' AND owner_xid = $2)";

/// A send between buckets, which no one statement (nor one transaction: DBOS's trigger
/// announces the message on its node, and Citus cannot commit a NOTIFY across nodes) can write:
/// while the sender owns its workflow, the message first (once by its id, derived from the
/// call), then the call's row. A sender that loses its workflow between the two has sent the
/// message its successor would send: the successor's send finds it by its id and adds none.
async fn send_across(
    from: &Sql,
    to: &Sql,
    conn: &mut PgConnection,
    op: &Op,
) -> Result<OpOutcome, DbError> {
    let Op::Send {
        destination,
        topic,
        message,
        ..
    } = op
    else {
        return Err(DbError::Query("only a send goes between buckets".into()));
    };
    let s = op.step();
    let owns: bool = from
        .query(OWNS)
        .bind(&s.workflow_id)
        .bind(&s.owner)
        .fetch_one(&mut *conn)
        .await?
        .try_get(0)?;
    if owns {
        let message = OutgoingMessage {
            id: Op::message_id(s),
            destination: destination.clone(),
            topic: topic.clone(),
            message: message.clone(),
            created_at: crate::sysdb::next_created_at(),
        };
        send_on(to, conn, &[&message]).await?;
        let record = StepWrite {
            workflow_id: s.workflow_id.clone(),
            owner: s.owner.clone(),
            function_id: s.function_id,
            name: op.name().to_owned(),
            output: Some("null".into()),
            error: None,
            child_workflow_id: None,
            started_at: s.started_at,
            completed_at: now_ms(),
            app_name: s.app_name.clone(),
        };
        let written = super::steps::record(from, conn, &[&record]).await?;
        if written.first() == Some(&StepOutcome::Recorded) {
            return Ok(OpOutcome::Done {
                output: None,
                serialization: None,
            });
        }
    }
    let found = classify_one(
        from,
        conn,
        &s.workflow_id,
        &s.owner,
        s.function_id,
        op.name(),
    );
    Ok(found.await?.into())
}

/// The messages as arrays: $1 ids, $2 destinations, $3 topics, $4 messages, $5 times.
const SEND_BULK: &str = "INSERT INTO {s}.notifications \
    (message_uuid, destination_uuid, topic, message, serialization, created_at_epoch_ms) \
    SELECT m.id, m.destination, m.topic, m.message, 'portable_json', m.created_at \
    FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[]) \
        AS m(id, destination, topic, message, created_at) \
    ON CONFLICT (message_uuid) DO NOTHING";

/// $1 destination, $2 topic: the message a receive would take next.
const PEEK: &str = "SELECT message_uuid, message, serialization FROM {s}.notifications \
    WHERE destination_uuid = $1 AND topic = $2 AND NOT consumed \
    ORDER BY created_at_epoch_ms, message_uuid LIMIT 1";

/// `messages` in one statement on `conn` (a start's transaction: signal-with-start).
pub(super) async fn send_on(
    sql: &Sql,
    conn: &mut PgConnection,
    messages: &[&OutgoingMessage],
) -> Result<(), DbError> {
    if messages.is_empty() {
        return Ok(());
    }
    send_query(sql, messages).execute(conn).await?;
    Ok(())
}

/// [`SEND_BULK`]'s Citus form.
const CITUS_SEND_BULK: &str = "SELECT {s}.stead_send_bulk($1::text[], $2::text[], $3::text[], \
    $4::text[], $5::int8[])";

fn send_query<'q>(sql: &'q Sql, messages: &[&'q OutgoingMessage]) -> Stmt<'q> {
    let column =
        |f: fn(&'q OutgoingMessage) -> &'q str| messages.iter().map(|m| f(m)).collect::<Vec<_>>();
    sql.query(sql.dialect(SEND_BULK, CITUS_SEND_BULK))
        .bind(column(|m| &m.id))
        .bind(column(|m| &m.destination))
        .bind(column(|m| &m.topic))
        .bind(column(|m| &m.message))
        .bind(messages.iter().map(|m| m.created_at).collect::<Vec<_>>())
}

#[async_trait]
impl Messages for Postgres {
    /// On a sharded layout, each bucket's messages in a statement of their own (a batch then
    /// commits by bucket; each message is written once by its id, so a retry is whole), once
    /// every destination is found.
    async fn send_bulk(&self, messages: &[OutgoingMessage]) -> Result<(), DbError> {
        let all: Vec<&OutgoingMessage> = messages.iter().collect();
        let router = self.router();
        let mut buckets = Vec::with_capacity(all.len());
        for m in &all {
            match router.find(&m.destination).await? {
                Some(b) => buckets.push(b),
                // A missing destination fails the batch before any bucket writes.
                None if router.sharded() => {
                    return Err(DbError::MissingReference {
                        constraint: "notifications_destination_uuid_fkey".into(),
                    })
                }
                None => buckets.push(0),
            }
        }
        for (b, _, group) in super::route::split_by(&all, &buckets) {
            let sql = self.shards.bucket(b);
            send_query(&sql, &group).execute(&self.pool).await?;
        }
        Ok(())
    }

    async fn peek_message(
        &self,
        destination: &str,
        topic: &str,
    ) -> Result<Option<PeekedMessage>, DbError> {
        let row = self
            .locate(destination)
            .await?
            .query(PEEK)
            .bind(destination)
            .bind(topic)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| PeekedMessage::from_row(&r)).transpose()?)
    }
}
