//! A lane's dedicated Postgres connection. Each batch is one statement in autocommit (a claim
//! of a queue with shared limits: a short transaction under the queue's advisory lock), so one
//! round trip and one commit carry however many requests the flush holds.

use std::sync::Arc;

use async_trait::async_trait;
use sqlx::postgres::PgConnection;

use super::sql::Sql;
use super::{claim, finish, ops, start, steps};
use crate::error::DbError;
use crate::sysdb::store::Session;
use crate::sysdb::{
    ClaimOutcome, ClaimRequest, FinishOutcome, FinishWrite, NewWorkflow, Op, OpOutcome,
    StartOutcome, StepOutcome, StepRow, StepWrite,
};

pub(super) struct PgSession {
    conn: PgConnection,
    sql: Arc<Sql>,
}

impl PgSession {
    pub(super) fn new(conn: PgConnection, sql: Arc<Sql>) -> PgSession {
        PgSession { conn, sql }
    }
}

#[async_trait]
impl Session for PgSession {
    async fn start(&mut self, batch: &[&NewWorkflow]) -> Result<Vec<StartOutcome>, DbError> {
        start::run(&self.sql, &mut self.conn, batch).await
    }

    async fn checkpoint(&mut self, batch: &[&StepWrite]) -> Result<Vec<StepOutcome>, DbError> {
        steps::record(&self.sql, &mut self.conn, batch).await
    }

    async fn finish(&mut self, batch: &[&FinishWrite]) -> Result<Vec<FinishOutcome>, DbError> {
        finish::run(&self.sql, &mut self.conn, batch).await
    }

    async fn load_steps(&mut self, ids: &[&str]) -> Result<Vec<Vec<StepRow>>, DbError> {
        steps::load(&self.sql, &mut self.conn, ids).await
    }

    async fn ops(&mut self, batch: &[&Op]) -> Result<Vec<OpOutcome>, DbError> {
        let mut outs = Vec::with_capacity(batch.len());
        for op in batch {
            outs.push(ops::run(&self.sql, &mut self.conn, op).await?);
        }
        Ok(outs)
    }

    async fn claim(&mut self, request: &ClaimRequest) -> Result<ClaimOutcome, DbError> {
        claim::run(&self.sql, &mut self.conn, request).await
    }
}
