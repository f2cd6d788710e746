//! A Citus cluster of a test's own (a coordinator and workers, each a `Cluster`), for the tests
//! that stop or restart a node: the shared cluster (`STEAD_TEST_CITUS`) serves every other
//! Citus test at once. Needs Citus built into the server's libraries (`citus.sh build`).

use super::cluster::{Cluster, Setup};

/// Why this machine cannot start a Citus cluster of its own, if it can't.
pub fn missing() -> Option<String> {
    let bin = super::cluster::bindir()?;
    let lib = bin.parent().map(|v| v.join("lib").join("citus.so"))?;
    if lib.exists() {
        None
    } else {
        Some(format!(
            "Citus is not built ({} is missing; ../shared/tools/citus.sh build)",
            lib.display()
        ))
    }
}

/// Skips the calling test (returns from it) unless it can start a Citus cluster of its own.
#[macro_export]
macro_rules! require_own_citus {
    () => {
        if let Some(why) =
            $crate::common::cluster::missing(false).or_else($crate::common::citus::missing)
        {
            $crate::common::skip(concat!(file!(), ":", line!()), &why);
            return;
        }
    };
}

/// A coordinator and its workers, each with database `db` holding the `citus` extension.
pub struct CitusCluster {
    pub coordinator: Cluster,
    pub workers: Vec<Cluster>,
    pub db: String,
}

impl CitusCluster {
    /// Starts a coordinator and `workers` workers, as `citus.sh up` sets them up.
    pub fn start(workers: usize, db: &str) -> CitusCluster {
        let node = || {
            Cluster::with(Setup {
                conf: vec![
                    "shared_preload_libraries = 'citus'".into(),
                    "max_prepared_transactions = 200".into(),
                    "wal_level = logical".into(),
                    "citus.local_hostname = '127.0.0.1'".into(),
                    "citus.enable_statistics_collection = off".into(),
                ],
                ..Setup::default()
            })
        };
        let coordinator = node();
        let workers: Vec<Cluster> = (0..workers).map(|_| node()).collect();
        for n in std::iter::once(&coordinator).chain(&workers) {
            n.create_db(db);
            n.psql(db, "CREATE EXTENSION citus");
        }
        coordinator.psql(
            db,
            &format!(
                "SELECT citus_set_coordinator_host('127.0.0.1', {})",
                coordinator.port
            ),
        );
        for w in &workers {
            coordinator.psql(
                db,
                &format!("SELECT citus_add_node('127.0.0.1', {})", w.port),
            );
        }
        CitusCluster {
            coordinator,
            workers,
            db: db.to_owned(),
        }
    }

    /// The coordinator's URL of the database.
    pub fn url(&self) -> String {
        self.coordinator.url(&self.db)
    }
}
