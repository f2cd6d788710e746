//! The fleet on SQLite: there is none. A file serves one executor, whose liveness is the file
//! lock (`Sqlite::lock_file`), and a relaunch recovers every `PENDING` workflow of the file
//! whatever its executor id; so the roster is empty and nothing is adopted or stranded.
//!
//! A relaunch on the file recovers every `PENDING` workflow of its version whatever its executor id
//! (`recover(.., any_executor)`). The file lock lasts as long as the process and nothing pings it,
//! so it does not bound liveness (`Lease::expires` is false): runs never fence on a lease here (the
//! embedded tests, `an_executor_keeps_running_steps_past_the_lease`).

use async_trait::async_trait;

use super::Sqlite;
use crate::error::DbError;
use crate::sysdb::dispatch::Executor;
use crate::sysdb::fleet::{Adopted, Adoption, ExecutorInfo, Fleet, Lease, Member};

/// The file lock already proves this executor alive.
struct FileLease;

#[async_trait]
impl Lease for FileLease {
    async fn register(&mut self, _: &Member) -> Result<(), DbError> {
        Ok(())
    }

    async fn ping(&mut self, _: &str) -> Result<(), DbError> {
        Ok(())
    }

    fn expires(&self) -> bool {
        false
    }
}

#[async_trait]
impl Fleet for Sqlite {
    async fn hold(&self, _: &str, _: u64) -> Result<Option<Box<dyn Lease>>, DbError> {
        Ok(Some(Box::new(FileLease)))
    }

    async fn list_executors(&self, _: Option<&str>) -> Result<Vec<ExecutorInfo>, DbError> {
        Ok(Vec::new())
    }

    async fn live_executors(&self, _: Option<&str>) -> Result<u64, DbError> {
        Ok(0)
    }

    async fn adoptable(&self, _: &Executor<'_>) -> Result<Vec<String>, DbError> {
        Ok(Vec::new())
    }

    async fn adopt(&self, _: &Adoption<'_>) -> Result<Option<Adopted>, DbError> {
        Ok(Some(Adopted::default()))
    }

    async fn stranded(&self, _: Option<&str>) -> Result<Vec<String>, DbError> {
        Ok(Vec::new())
    }

    async fn move_stranded(&self, _: &[String], _: &str) -> Result<u64, DbError> {
        Ok(0)
    }
}
