//! Hostile input: values the database can never hold fail the call that wrote them (typed),
//! never the run; refusals are not retried; foreign rows, bad serialization and panicking user
//! values do not blind or crash anything.

mod common;

use std::time::Duration;

use stead::{Context, DbError, Error, WorkflowOptions};

/// Each way a durable call can carry a value the database would refuse, and what it is.
const HOSTILE: &[(&str, &str)] = &[
    ("nul-step", "a NUL byte in a step name"),
    ("nul-event", "a NUL byte in an event key"),
    ("nul-topic", "a NUL byte in a recv topic"),
    ("nul-send", "a NUL byte in a send topic"),
    ("nul-stream", "a NUL byte in a stream key"),
    ("long-event", "an event key of 10,000 characters (past NOTIFY's 8,000 bytes)"),
    ("long-step", "a step name of ~10 KB (past an index row's limit)"),
];

/// Runs a counted step, then the hostile call `case`, and returns the kind of error the call
/// failed with (the workflow sees it typed and goes on), then a last step.
async fn hostile_call(ctx: Context, case: String) -> stead::Result<String> {
    let id = ctx.workflow_id().to_owned();
    ctx.step("before", || async {
        common::count_body(&id, 1);
        Ok(())
    })
    .await?;
    let long = "k".repeat(10_000);
    let result: stead::Result<()> = match case.as_str() {
        "nul-step" | "long-step" => {
            let name = if case == "nul-step" {
                "st\0ep".to_owned()
            } else {
                "s".repeat(10_240)
            };
            ctx.step(&name, || async {
                common::count_body(&id, 2);
                Ok(())
            })
            .await
        }
        "nul-event" => ctx.set_event("ke\0y", &1).await,
        "long-event" => ctx.set_event(&long, &1).await,
        "nul-topic" => ctx
            .recv::<u32>(Some("to\0pic"), Duration::from_millis(10))
            .await
            .map(drop),
        "nul-send" => ctx.send(&id, &1, Some("to\0pic")).await,
        "nul-stream" => ctx.write_stream("str\0eam", &1).await,
        other => panic!("unknown case {other}"),
    };
    let kind = match result {
        Ok(()) => "accepted".to_owned(),
        Err(e) => e.kind().to_owned(),
    };
    ctx.step("after", || async { Ok(()) }).await?;
    Ok(kind)
}

/// A step the database refuses to record (a constraint the test adds): the step's body ran.
async fn refused_step(ctx: Context, _: ()) -> stead::Result<()> {
    let id = ctx.workflow_id().to_owned();
    let refused = ctx
        .step("refused", || async {
            common::count_body(&id, 1);
            Ok(())
        })
        .await;
    match refused {
        Err(Error::Database(DbError::Refused { .. })) => {}
        other => panic!("expected a refusal, got {other:?}"),
    }
    refused
}

both_backends! {
async fn values_the_database_cannot_hold_fail_the_call_not_the_run(db) {
    let rt = common::builder(&db)
        .workflow("hostile", hostile_call)
        .launch()
        .await
        .unwrap();
    let prefix = format!("hostile-{}-", db.name);
    for (case, what) in HOSTILE {
        let id = format!("{prefix}{case}");
        let h = rt
            .start("hostile", case.to_string(), WorkflowOptions::with_id(&id))
            .await
            .unwrap();
        let kind = tokio::time::timeout(Duration::from_secs(20), h.result::<String>())
            .await
            .unwrap_or_else(|_| panic!("{what}: the workflow did not finish"))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(kind, "InvalidArgument", "{what}");
        assert_eq!(common::body_run(&id, 1), 1, "{what}: the step before ran again");
        assert_eq!(common::body_run(&id, 2), 0, "{what}: a refused step's body ran");
        assert_eq!(h.status().await.unwrap().recovery_attempts, 1, "{what}: restarted");
    }
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn a_record_the_database_refuses_fails_the_step_once_without_a_restart(db) {
    let rt = common::builder(&db)
        .workflow("refused", refused_step)
        .launch()
        .await
        .unwrap();
    let pool = db.checks().await;
    let refuse = if db.is_sqlite() {
        "CREATE TRIGGER dbos.refuse BEFORE INSERT ON operation_outputs \
         WHEN NEW.function_name = 'refused' BEGIN SELECT RAISE(ABORT, 'refused'); END"
    } else {
        "ALTER TABLE dbos.operation_outputs ADD CONSTRAINT refuse \
         CHECK (function_name <> 'refused')"
    };
    sqlx::query(sqlx::AssertSqlSafe(refuse)).execute(&pool).await.unwrap();
    let id = format!("refused-{}", db.name);
    let h = rt
        .start("refused", (), WorkflowOptions::with_id(&id))
        .await
        .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(20), h.result::<()>())
        .await
        .expect("the refusal was retried instead of failing the call");
    match outcome {
        Err(Error::WorkflowFailed { error, .. }) => {
            assert_eq!(error.name, "DatabaseError");
            assert!(error.message.contains("refused"), "{}", error.message);
        }
        other => panic!("expected the workflow to fail, got {other:?}"),
    }
    assert_eq!(common::body_run(&id, 1), 1, "the step body ran again");
    assert_eq!(h.status().await.unwrap().recovery_attempts, 1, "restarted");
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}
