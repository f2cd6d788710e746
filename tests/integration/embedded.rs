//! The embedded default: with no URL the system database is a SQLite file named after the app
//! in the working directory; a file serves one executor process at a time; clients may open it
//! beside its executor.

use std::time::Duration;

use stead::{Client, Context, Error, Runtime, WorkflowOptions};

use crate::common;

/// Set in the child process: the directory it runs in.
const CHILD_DIR: &str = "STEAD_TEST_EMBEDDED_DIR";

async fn double(_ctx: Context, n: i64) -> stead::Result<i64> {
    Ok(n * 2)
}

async fn double_in_a_step(ctx: Context, n: i64) -> stead::Result<i64> {
    ctx.step_typed("double", || async move { Ok::<_, std::io::Error>(n * 2) })
        .await
}

// In a module named `sqlite`, so `cargo test sqlite` (the SQLite half) runs them too.
mod sqlite {
    use super::*;

    /// Entry point of the process that launches a runtime with no URL configured.
    #[tokio::test]
    #[ignore = "run by without_a_url_the_database_is_a_file_named_after_the_app"]
    async fn default_url_child() {
        let Ok(dir) = std::env::var(CHILD_DIR) else {
            return;
        };
        std::env::set_current_dir(&dir).unwrap();
        let rt = Runtime::builder()
            .app_name("shop")
            .workflow("double", double)
            .launch()
            .await
            .unwrap();
        let handle = rt
            .start("double", 4, WorkflowOptions::with_id("d-4"))
            .await
            .unwrap();
        assert_eq!(common::within(handle.result::<i64>()).await.unwrap(), 8);
        rt.shutdown(Duration::from_secs(5)).await.unwrap();
    }

    /// The file lock lasts as long as the process and nothing renews a lease on SQLite: runs
    /// started long after launch still run their steps (they were stopped as "not the owner"
    /// once the Postgres lease's length had passed).
    #[tokio::test]
    async fn an_executor_keeps_running_steps_past_the_lease() {
        let db = common::TestDb::sqlite().await;
        let lease = Duration::from_millis(500);
        let rt = common::builder(&db)
            .lease(lease)
            .workflow("double", double_in_a_step)
            .launch()
            .await
            .unwrap();
        tokio::time::sleep(lease * 3).await;
        let handle = rt
            .start("double", 21, WorkflowOptions::with_id("late"))
            .await
            .unwrap();
        assert_eq!(common::within(handle.result::<i64>()).await.unwrap(), 42);
        rt.shutdown(Duration::from_secs(5)).await.unwrap();
    }

    #[tokio::test]
    async fn without_a_url_the_database_is_a_file_named_after_the_app() {
        let db = common::TestDb::sqlite().await;
        let dir = std::path::Path::new(db.url.trim_start_matches("sqlite://"))
            .parent()
            .unwrap()
            .to_owned();
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "embedded::sqlite::default_url_child",
                "--ignored",
            ])
            .env(CHILD_DIR, &dir)
            .env_remove("STEAD_DATABASE_URL")
            .env_remove("DATABASE_URL")
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "the child failed: {status}");
        let file = dir.join("shop.sqlite");
        assert!(file.exists(), "no {}", file.display());
        // The workflow is in that file, readable by a client.
        let client = Client::connect(&format!("sqlite://{}", file.display()))
            .await
            .unwrap();
        assert_eq!(
            common::within(client.handle("d-4").result::<i64>())
                .await
                .unwrap(),
            8
        );
        client.shutdown(Duration::from_secs(5)).await.unwrap();
    }

    #[tokio::test]
    async fn a_second_executor_on_one_file_is_refused_until_the_first_stops() {
        let db = common::TestDb::sqlite().await;
        let first = common::builder(&db)
            .workflow("double", double)
            .launch()
            .await
            .unwrap();
        let err = match common::builder(&db)
            .workflow("double", double)
            .executor_id("another")
            .launch()
            .await
        {
            Err(e) => e,
            Ok(_) => panic!("a second executor launched on the same file"),
        };
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("in use by another executor") && text.contains("stead.sqlite"),
            "{text}"
        );

        // A client may open the file beside its executor and enqueue work for it.
        let client = Client::connect(&db.url).await.unwrap();
        let handle = client
            .enqueue(
                "_dbos_internal_queue",
                "double",
                5,
                WorkflowOptions::with_id("from-client"),
            )
            .await
            .unwrap();
        assert_eq!(common::within(handle.result::<i64>()).await.unwrap(), 10);
        client.shutdown(Duration::from_secs(5)).await.unwrap();

        first.shutdown(Duration::from_secs(5)).await.unwrap();
        let second = common::builder(&db)
            .workflow("double", double)
            .launch()
            .await
            .unwrap();
        second.shutdown(Duration::from_secs(5)).await.unwrap();
    }

    #[tokio::test]
    async fn a_schema_name_on_a_sqlite_url_is_refused_not_ignored() {
        let db = common::TestDb::sqlite().await;
        let err = match common::builder(&db).schema("tenant").launch().await {
            Err(e) => e,
            Ok(_) => panic!("a schema was accepted for a SQLite file"),
        };
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert!(err.to_string().contains("\"tenant\""), "{err}");
    }
}
