//! Sharded mode: one application's system database spread over a Citus cluster as `n` bucket
//! schemas, each a complete DBOS system schema that Citus places whole on one node
//! (schema-based sharding). Owns the layout (how many buckets, their schema names), where a
//! workflow lives (its bucket) and finding it again; it never decides what a statement does.
//!
//! **Why buckets of whole schemas.** Every statement about one workflow touches one schema, so
//! Citus routes it whole to one node, and the statements stead runs on one Postgres run there
//! unchanged; a DBOS tool pointed at one bucket schema sees an ordinary DBOS database. A queue
//! spans the buckets: a claim surveys each and takes its share of the queue's head from each
//! (`claim_sharded.rs`), with no lock across nodes.
//!
//! **Layout.** Bucket 0 is the configured schema itself (the *home*: it also holds the fleet's
//! roster and the schedules); bucket `k > 0` is `<schema>_shard<k>`. The home's
//! `stead_sharding` row names the count, fixed when the layout is made (`sharding=citus&shards=N`
//! in the URL at the first migration; default [`DEFAULT_SHARDS`]). A schema without that row is
//! one bucket: plain Postgres, or Citus unsharded.
//!
//! **Placement.** A workflow's bucket is the FNV-1a hash of its shard key modulo `n`: the key the
//! caller gave (a tenant, so its workflows and their messages stay together), else its queue's
//! deduplication id or its partition key (so deduplication and partition limits are one bucket's,
//! and so exact), else the workflow id (`NewWorkflow::placement_key`). A schedule's firings live
//! under the schedule's name, a debounced workflow under its key, a fork or the next run of a
//! chain beside its original. Workflows this process starts, claims or recovers are remembered by id while they live
//! here; any other id is looked up: first in the bucket its id hashes to, then in every bucket
//! (one read each, remembered).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::DashMap;

use super::sql::Sql;
use crate::base::hash::fnv1a;

/// Buckets a sharded layout gets unless the URL says (`shards=N`).
pub(crate) const DEFAULT_SHARDS: u16 = 8;

/// The most buckets a layout may have: each is a schema of about twenty tables.
pub(crate) const MAX_SHARDS: u16 = 256;

/// How many ids of workflows not running here are remembered before the memory is cleared.
const REMEMBERED: usize = 100_000;

/// What the URL's `sharding` and `shards` parameters asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sharding {
    /// No request: the layout the schema has (sharded if its home says so).
    Unset,
    /// `sharding=citus`: migrations make (or keep) a sharded layout of this many buckets.
    Citus { shards: u16 },
}

impl Sharding {
    /// The buckets a new layout gets.
    pub(crate) fn shards(self) -> Option<u16> {
        match self {
            Sharding::Unset => None,
            Sharding::Citus { shards } => Some(shards),
        }
    }
}

/// Parses the `shards` parameter's value.
pub(crate) fn parse_shards(value: &str) -> Result<u16, String> {
    match value.parse::<u16>() {
        Ok(n) if (1..=MAX_SHARDS).contains(&n) => Ok(n),
        _ => Err(format!(
            "the parameter shards={value:?} must be a number of buckets from 1 to {MAX_SHARDS}"
        )),
    }
}

/// The schema of bucket `b` of the layout whose home is `home`.
pub(crate) fn bucket_schema(home: &str, b: u16) -> String {
    if b == 0 {
        home.to_owned()
    } else {
        format!("{home}_shard{b}")
    }
}

/// The bucket a shard key falls in, of `n`.
pub(crate) fn bucket_of(key: &str, n: usize) -> u16 {
    (fnv1a(key.bytes()) % n.max(1) as u64) as u16
}

/// The buckets of one store and where its workflows live.
pub(crate) struct Shards {
    /// Each bucket's statements; index 0 is the home. One bucket until the layout is read.
    buckets: RwLock<Arc<[Arc<Sql>]>>,
    /// Buckets of the workflows this process runs or looked up, by id.
    placed: DashMap<String, u16>,
    /// The layout is Citus's (distributed schemas), however many buckets it has.
    citus: AtomicBool,
}

impl Shards {
    /// One bucket: the home's statements.
    pub(crate) fn single(home: Arc<Sql>) -> Shards {
        Shards {
            buckets: RwLock::new(Arc::from(vec![home])),
            placed: DashMap::new(),
            citus: AtomicBool::new(false),
        }
    }

    /// Every bucket's statements, the home first.
    pub(crate) fn all(&self) -> Arc<[Arc<Sql>]> {
        self.buckets
            .read()
            .map(|b| b.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// How many buckets there are.
    pub(crate) fn count(&self) -> usize {
        self.all().len()
    }

    /// Whether there is more than one bucket.
    pub(crate) fn sharded(&self) -> bool {
        self.count() > 1
    }

    /// Sets the buckets (the layout read or made by a migration or a schema check), and
    /// whether they are Citus's.
    pub(crate) fn set(&self, buckets: Vec<Arc<Sql>>, citus: bool) {
        let mut held = self.buckets.write().unwrap_or_else(|e| e.into_inner());
        *held = Arc::from(buckets);
        self.citus.store(citus, Ordering::Release);
    }

    /// Whether the layout is Citus's: lanes then keep the server's plan caching (a forced
    /// generic plan cannot be routed by Citus), and statements avoid what it refuses.
    pub(crate) fn citus(&self) -> bool {
        self.citus.load(Ordering::Acquire)
    }

    /// Bucket `b`'s statements.
    pub(crate) fn bucket(&self, b: u16) -> Arc<Sql> {
        let all = self.all();
        all.get(usize::from(b)).unwrap_or(&all[0]).clone()
    }

    /// Where new workflow `id` goes: by its placement key (`NewWorkflow::placement_key`).
    /// Remembered.
    pub(crate) fn place(&self, id: &str, key: &str) -> u16 {
        let n = self.count();
        if n == 1 {
            return 0;
        }
        let b = bucket_of(key, n);
        self.remember(id, b);
        b
    }

    /// Remembers that workflow `id` lives in bucket `b` (a claim, a recovery, a lookup found it).
    pub(crate) fn remember(&self, id: &str, b: u16) {
        if self.count() == 1 {
            return;
        }
        if self.placed.len() >= REMEMBERED && !self.placed.contains_key(id) {
            self.placed.clear();
        }
        self.placed.insert(id.to_owned(), b);
    }

    /// Forgets workflow `id` (it finished here).
    pub(crate) fn forget(&self, id: &str) {
        if self.count() > 1 {
            self.placed.remove(id);
        }
    }

    /// The bucket remembered for `id`, or the one its id hashes to (where a workflow started
    /// without a shard key lives).
    pub(crate) fn guess(&self, id: &str) -> u16 {
        let n = self.count();
        if n == 1 {
            return 0;
        }
        self.placed
            .get(id)
            .map(|b| *b)
            .unwrap_or_else(|| bucket_of(id, n))
    }

    /// Whether `id`'s bucket is known (remembered), not only guessed.
    pub(crate) fn knows(&self, id: &str) -> bool {
        self.count() == 1 || self.placed.contains_key(id)
    }
}
