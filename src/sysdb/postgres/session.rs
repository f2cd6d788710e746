//! The Postgres store's lifecycle and its sessions: a lane's dedicated connection, on which each
//! batch is one statement in autocommit (a claim of a queue with shared limits: a short
//! transaction under the queue's advisory lock), so one round trip and one commit carry however
//! many requests the flush holds.
//!
//! **Lane settings.** Lane connections use `plan_cache_mode=force_generic_plan` and
//! `enable_seqscan=off`, and their statements are shaped so only the primary key can drive them (a
//! `LATERAL .. LIMIT 1` probe, `IS NOT DISTINCT FROM` instead of `= 'PENDING'`): a generic plan
//! cached while the table was small once chose the partial `PENDING` index and scanned every
//! running workflow per batch (at 60,000 waiting `recv`s, 3–5 ms per op). `plans.rs` holds the
//! tests that keep it so.

use std::sync::Arc;

use async_trait::async_trait;
use dashmap::DashSet;
use sqlx::postgres::PgConnection;
use sqlx::ConnectOptions;

use super::route::{self, Router};
use super::sql::Sql;
use super::{claim, claim_sharded, finish, ops, start, steps, Pooler, Postgres};
use crate::error::{DbError, Error};
use crate::sysdb::store::{Session, Store};
use crate::sysdb::{
    ClaimOutcome, ClaimRequest, FinishOutcome, FinishWrite, LoadSteps, NewWorkflow, Op, OpOutcome,
    StartOutcome, StepOutcome, StepPage, StepWrite,
};

/// The lanes' session settings (see the module's doc).
pub(super) const SETTINGS: [(&str, &str); 2] = [
    ("plan_cache_mode", "force_generic_plan"),
    ("enable_seqscan", "off"),
];

#[async_trait]
impl Store for Postgres {
    /// Lanes run only batched key lookups, thousands of times with one shape: plan each once,
    /// and never as a sequential scan (a plan cached while the tables were small would scan
    /// them whole forever after).
    ///
    /// Behind a pooler the settings are set after connecting (PgBouncer refuses them as
    /// startup parameters); behind a transaction pooler no session setting lasts, so they are
    /// the lanes' routines' own (`routines.rs`), and there is no server process of its own to
    /// know.
    async fn open_session(&self) -> Result<Box<dyn Session>, DbError> {
        let mut pid = 0;
        // Citus plans a routed statement anew each time; forcing a generic plan stops it
        // from routing at all, and workers never see a session's settings.
        let settings: &[(&str, &str)] = if self.shards.citus() { &[] } else { &SETTINGS };
        let conn = match self.pooler {
            Pooler::None => {
                let mut conn = self
                    .connect
                    .clone()
                    .options(settings.iter().copied())
                    .connect()
                    .await?;
                pid = backend_pid(&mut conn).await?;
                conn
            }
            Pooler::Session => {
                let mut conn = self.connect.clone().connect().await?;
                let set: String = settings
                    .iter()
                    .map(|(k, v)| format!("SET {k} = {v};"))
                    .collect();
                if !set.is_empty() {
                    sqlx::raw_sql(sqlx::AssertSqlSafe(set))
                        .execute(&mut conn)
                        .await?;
                }
                pid = backend_pid(&mut conn).await?;
                conn
            }
            Pooler::Transaction => self.connect.clone().connect().await?,
        };
        if pid != 0 {
            self.lane_pids.insert(pid);
        }
        Ok(Box::new(PgSession {
            conn,
            sql: self.lane_sql.clone(),
            pid,
            lane_pids: self.lane_pids.clone(),
            router: self.router(),
        }))
    }

    async fn close(&self) {
        if self.owns_pool {
            self.pool.close().await;
        }
    }

    fn close_now(&self) {
        // `close` marks the pool closed when called; its future only waits.
        if self.owns_pool {
            drop(self.pool.close());
        }
    }

    fn lock_for_executor(&self) -> Result<(), Error> {
        Ok(())
    }

    fn is_embedded(&self) -> bool {
        false
    }

    fn can_listen(&self) -> bool {
        self.pooler != Pooler::Transaction
    }
}

/// The connection's server process, whose own announcements the listener skips.
async fn backend_pid(conn: &mut PgConnection) -> Result<u32, DbError> {
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await?;
    Ok(u32::try_from(pid).unwrap_or_default())
}

pub(super) struct PgSession {
    conn: PgConnection,
    sql: Arc<Sql>,
    /// Its server process, in `lane_pids` while the session lives.
    pid: u32,
    lane_pids: Arc<DashSet<u32>>,
    /// Where each request goes on a sharded layout (`route.rs`).
    router: Router,
}

impl Drop for PgSession {
    fn drop(&mut self) {
        self.lane_pids.remove(&self.pid);
    }
}

#[async_trait]
impl Session for PgSession {
    async fn start(&mut self, batch: &[&NewWorkflow]) -> Result<Vec<StartOutcome>, DbError> {
        if !self.router.sharded() {
            return start::run(&self.sql, &mut self.conn, batch).await;
        }
        let shards = self.router.shards.clone();
        let groups = route::split(batch, |w| shards.place(&w.id, w.placement_key()));
        let mut answers = Vec::with_capacity(groups.len());
        for (b, places, group) in groups {
            let out = start::run(&shards.bucket(b), &mut self.conn, &group).await?;
            answers.push((places, out));
        }
        route::merge(batch.len(), answers)
    }

    async fn checkpoint(&mut self, batch: &[&StepWrite]) -> Result<Vec<StepOutcome>, DbError> {
        if !self.router.sharded() {
            return steps::record(&self.sql, &mut self.conn, batch).await;
        }
        let buckets = self
            .router
            .locate_all(batch.iter().map(|s| s.workflow_id.as_str()))
            .await?;
        let mut answers = Vec::new();
        for (b, places, group) in route::split_by(batch, &buckets) {
            let sql = self.router.shards.bucket(b);
            answers.push((places, steps::record(&sql, &mut self.conn, &group).await?));
        }
        route::merge(batch.len(), answers)
    }

    async fn finish(&mut self, batch: &[&FinishWrite]) -> Result<Vec<FinishOutcome>, DbError> {
        if !self.router.sharded() {
            return finish::run(&self.sql, &mut self.conn, batch).await;
        }
        let buckets = self
            .router
            .locate_all(batch.iter().map(|f| f.workflow_id.as_str()))
            .await?;
        let mut answers = Vec::new();
        for (b, places, group) in route::split_by(batch, &buckets) {
            let sql = self.router.shards.bucket(b);
            answers.push((places, finish::run(&sql, &mut self.conn, &group).await?));
        }
        // The runs end here: their workflows need not be remembered any more.
        for f in batch {
            self.router.shards.forget(&f.workflow_id);
        }
        route::merge(batch.len(), answers)
    }

    async fn load_steps(&mut self, pages: &[&LoadSteps]) -> Result<Vec<StepPage>, DbError> {
        if !self.router.sharded() {
            return steps::load(&self.sql, &mut self.conn, pages).await;
        }
        let buckets = self
            .router
            .locate_all(pages.iter().map(|p| p.workflow_id.as_str()))
            .await?;
        let mut answers = Vec::new();
        for (b, places, group) in route::split_by(pages, &buckets) {
            let sql = self.router.shards.bucket(b);
            answers.push((places, steps::load(&sql, &mut self.conn, &group).await?));
        }
        route::merge(pages.len(), answers)
    }

    async fn ops(&mut self, batch: &[&Op]) -> Result<Vec<OpOutcome>, DbError> {
        let mut outs = Vec::with_capacity(batch.len());
        for op in batch {
            outs.push(match self.router.sharded() {
                false => ops::run(&self.sql, &mut self.conn, op).await?,
                true => ops::run_sharded(&self.router, &mut self.conn, op).await?,
            });
        }
        Ok(outs)
    }

    async fn claim(&mut self, request: &ClaimRequest) -> Result<ClaimOutcome, DbError> {
        if !self.router.sharded() {
            return claim::run(&self.sql, &mut self.conn, request).await;
        }
        claim_sharded::run(&self.router, &mut self.conn, request).await
    }
}
