//! Getting started with the binary: `migrate` on an empty database, `--help`, the database URL
//! from the flag or the environment, and one-line errors with exit codes.

use super::*;

both_backends! {
async fn migrate_prepares_an_empty_database_for_clients_and_runtimes(db) {
    let url = db.url.as_str();
    if db.is_sqlite() {
        // A read-only command on a missing file leaves no empty file behind a mistyped path.
        let file = url.trim_start_matches("sqlite://");
        for args in [&["workflow", "list"][..], &["queue", "list"], &["schedule", "list"]] {
            let r = stead(url, args).await;
            let line = failed(&r, 4);
            assert!(line.contains(&format!("{file} does not exist")), "{line}");
            assert!(!std::path::Path::new(file).exists(), "{args:?} created {file}");
        }
    } else {
        let r = stead(url, &["workflow", "list"]).await;
        assert_eq!(
            failed(&r, 1),
            "error: schema 'dbos' has no stead tables: run `stead migrate` first"
        );
    }

    // A SQLite file has one schema, `main`; schemas of their own are Postgres's.
    let schema = if db.is_sqlite() { "main" } else { "dbos" };
    let out = ok(url, &["migrate"]).await;
    assert_eq!(
        out,
        format!("migrated schema '{schema}' to version 125 (was: none)\n")
    );
    let again = json(url, &["migrate"]).await;
    assert_eq!(
        (&again["applied"], &again["version"]),
        (&Value::Bool(false), &Value::from(125))
    );
    if !db.is_sqlite() {
        let other = json(url, &["migrate", "--schema", "tenant_b"]).await;
        assert_eq!(
            (&other["schema"], &other["applied"]),
            (&Value::from("tenant_b"), &Value::Bool(true))
        );
    }

    Client::connect(url)
        .await
        .unwrap()
        .shutdown(Duration::from_secs(5))
        .await
        .unwrap();
    let rt = builder(&db).launch().await.unwrap();
    let h = rt.start("double", 21u64, WorkflowOptions::with_id("after"));
    assert_eq!(h.await.unwrap().result::<u64>().await.unwrap(), 42);
    let listed = json(url, &["workflow", "list"]).await;
    assert_eq!(ids_of(&listed), ["after"]);
    if !db.is_sqlite() {
        let empty = json(url, &["--schema", "tenant_b", "workflow", "list"]).await;
        assert_eq!(empty, Value::Array(vec![]));
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

#[tokio::test]
async fn help_separates_global_options_and_says_database_url() {
    let r = exec(command(&["workflow", "list", "--help"])).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (own, global) = r.stdout.split_once("Global options:").expect(&r.stdout);
    assert!(
        own.contains("-s, --status") && own.contains("-l, --limit"),
        "{own}"
    );
    assert!(!own.contains("--database-url"), "{own}");
    assert!(
        global.contains("-d, --database-url") && global.contains("Database URL"),
        "{global}"
    );
    assert!(!r.stdout.contains("Postgres URL"), "{}", r.stdout);
}

#[tokio::test]
async fn an_unreachable_database_fails_fast_with_one_line() {
    let url = "postgres://postgres:s3cret@127.0.0.1:1/nowhere";
    for args in [&["workflow", "list"][..], &["migrate"]] {
        let r = stead(url, args).await;
        let line = failed(&r, 4);
        assert!(
            line.starts_with("error: cannot connect to database at postgres://postgres:***@127.0.0.1:1/nowhere: "),
            "{line}"
        );
        assert!(line.contains("refused"), "{line}");
        // Behaviour: a refused connection fails at once, not after the 30 s connect timeout; a loaded
        // machine's process start is a second or two.
        assert!(r.took < Duration::from_secs(10), "took {:?}", r.took);
    }
    let quick = stead(url, &["--connect-timeout", "300ms", "queue", "list"]).await;
    failed(&quick, 4);
    // Behaviour: --connect-timeout 300ms is obeyed; 3 s is the process start under load with room.
    assert!(quick.took < Duration::from_secs(3), "took {:?}", quick.took);
}

both_backends! {
async fn the_url_comes_from_the_flag_then_stead_database_url_then_database_url(db) {
    stead::migrate(&db.url, "dbos").await.unwrap();
    let dead = "postgres://postgres@127.0.0.1:1/nowhere";

    let r = exec(command(&["workflow", "list"])).await;
    assert_eq!(
        failed(&r, 2),
        "error: no database URL: pass --database-url or set STEAD_DATABASE_URL or DATABASE_URL"
    );
    let mut cmd = command(&["workflow", "list"]);
    cmd.env("STEAD_DATABASE_URL", &db.url)
        .env("DATABASE_URL", dead);
    assert_eq!(exec(cmd).await.code, 0);
    let mut cmd = command(&["workflow", "list"]);
    cmd.env("DATABASE_URL", &db.url);
    assert_eq!(exec(cmd).await.code, 0);
    let mut cmd = command(&["--database-url", &db.url, "workflow", "list"]);
    cmd.env("STEAD_DATABASE_URL", dead);
    assert_eq!(exec(cmd).await.code, 0);

    let r = stead(&db.url, &["workflow", "list", "--status", "running"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = stead("not a url", &["workflow", "list"]).await;
    assert_eq!(failed(&r, 2).split(':').next(), Some("error"));
}
}
