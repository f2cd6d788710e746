//! The SQLite store's lifecycle and its sessions: a lane borrows the one writer for each call,
//! and runs the whole batch in one write transaction, one request after another, so a later
//! request of the batch sees an earlier one's row.

use async_trait::async_trait;

use super::{claim, finish, ops, start, steps, Sqlite};
use crate::error::{DbError, Error};
use crate::sysdb::store::{Session, Store};
use crate::sysdb::{
    ClaimOutcome, ClaimRequest, FinishOutcome, FinishWrite, LoadSteps, NewWorkflow, Op, OpOutcome,
    StartOutcome, StepOutcome, StepPage, StepWrite,
};

#[async_trait]
impl Store for Sqlite {
    async fn open_session(&self) -> Result<Box<dyn Session>, DbError> {
        Ok(Box::new(LiteSession::new(self.clone())))
    }

    async fn close(&self) {
        self.writer.close().await;
        if self.owns_reader {
            self.reader.close().await;
        }
        self.release();
    }

    fn close_now(&self) {
        drop(self.writer.close());
        if self.owns_reader {
            drop(self.reader.close());
        }
        self.release();
    }

    fn lock_for_executor(&self) -> Result<(), Error> {
        self.lock_file()
    }

    fn is_embedded(&self) -> bool {
        true
    }
}

pub(super) struct LiteSession {
    db: Sqlite,
}

impl LiteSession {
    fn new(db: Sqlite) -> LiteSession {
        LiteSession { db }
    }
}

/// Runs `$body` (which uses `$tx`, the transaction's connection) in one write transaction.
macro_rules! in_write {
    ($db:expr, |$tx:ident| $body:expr) => {{
        let mut tx = $db.write().await?;
        let $tx = &mut *tx;
        let out = $body.await?;
        tx.commit().await?;
        Ok(out)
    }};
}

#[async_trait]
impl Session for LiteSession {
    async fn start(&mut self, batch: &[&NewWorkflow]) -> Result<Vec<StartOutcome>, DbError> {
        in_write!(self.db, |tx| start::run(tx, batch))
    }

    async fn checkpoint(&mut self, batch: &[&StepWrite]) -> Result<Vec<StepOutcome>, DbError> {
        in_write!(self.db, |tx| steps::record(tx, batch))
    }

    async fn finish(&mut self, batch: &[&FinishWrite]) -> Result<Vec<FinishOutcome>, DbError> {
        in_write!(self.db, |tx| finish::run(tx, batch))
    }

    async fn load_steps(&mut self, pages: &[&LoadSteps]) -> Result<Vec<StepPage>, DbError> {
        in_write!(self.db, |tx| steps::load_all(tx, pages))
    }

    async fn ops(&mut self, batch: &[&Op]) -> Result<Vec<OpOutcome>, DbError> {
        in_write!(self.db, |tx| ops::run_all(tx, batch))
    }

    async fn claim(&mut self, request: &ClaimRequest) -> Result<ClaimOutcome, DbError> {
        in_write!(self.db, |tx| claim::run(tx, request))
    }
}
