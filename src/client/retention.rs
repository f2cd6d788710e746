//! The client's garbage collection on demand; the work is `crate::engine::retention::collect`, which the
//! retention actor runs on its timer.

use crate::client::Client;
use crate::engine::retention::{collect, Retention};
use crate::error::Result;

impl Client {
    /// Deletes the finished workflows `policy` does not keep, now; returns how many.
    /// `PENDING`, `ENQUEUED` and `DELAYED` workflows are never deleted.
    pub async fn garbage_collect(&self, policy: &Retention) -> Result<u64> {
        collect(self.shared(), policy).await
    }
}
