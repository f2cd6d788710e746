//! The testing kit (feature `testing`): a three-step payment whose recorded run is exported to a
//! history file and replayed with no database against the same code and against a change, then
//! crashed at every call boundary by the crash matrix. It needs no database server: every
//! runtime here keeps its state in a temporary SQLite file.
//!
//! ```text
//! cargo run --example testing_kit --features testing
//! ```

use std::path::PathBuf;
use std::time::Duration;

use stead::testing::{check_dir, CrashMatrix, Effects, KitError};
use stead::{Context, Runtime, RuntimeBuilder, WorkflowOptions};

/// Reserve, charge, then send the receipt; every effect inside a step, counted in `fx`.
async fn pay(ctx: Context, amount: u32, fx: Effects) -> stead::Result<String> {
    let fx = &fx;
    ctx.step("reserve", || async {
        fx.hit("reserve");
        Ok(())
    })
    .await?;
    let charge: String = ctx
        .step("charge", || async {
            fx.hit("charge");
            Ok(format!("ch-{amount}"))
        })
        .await?;
    ctx.step("receipt", || async {
        fx.hit("receipt");
        Ok(())
    })
    .await?;
    Ok(charge)
}

/// A later version that renames the charge step without a patch: old runs no longer replay.
async fn pay_renamed(ctx: Context, amount: u32) -> stead::Result<String> {
    ctx.step("reserve", || async { Ok(()) }).await?;
    let charge: String = ctx
        .step("charge-card", || async move { Ok(format!("ch-{amount}")) })
        .await?;
    ctx.step("receipt", || async { Ok(()) }).await?;
    Ok(charge)
}

/// The application's builder: `pay` registered, counting into `fx`.
fn app(fx: &Effects) -> RuntimeBuilder {
    let fx = fx.clone();
    Runtime::builder().workflow("pay", move |ctx, amount| pay(ctx, amount, fx.clone()))
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("stead-example-{}-{name}", std::process::id()))
}

#[tokio::main]
async fn main() -> Result<(), KitError> {
    let fx = Effects::new();
    let (db, histories) = (temp("app.sqlite"), temp("histories"));
    let _ = std::fs::create_dir_all(&histories);

    // 1. A recorded run, exported to a file (the CLI: `stead workflow export pay-1 -o FILE`).
    let rt = app(&fx)
        .database_url(format!("sqlite://{}", db.display()))
        .launch()
        .await?;
    let run = rt
        .start("pay", 12, WorkflowOptions::with_id("pay-1"))
        .await?;
    println!("recorded run: {}", run.result::<String>().await?);
    let history = rt.client().export_history("pay-1").await?;
    history.write(histories.join(history.file_name()))?;
    println!(
        "exported {} calls to {}",
        history.steps.len(),
        histories.display()
    );
    rt.shutdown(Duration::from_secs(5)).await?;

    // 2. Replayed from the folder, no database: the same code passes, the rename is reported.
    let replayed = check_dir(app(&fx), &histories).await?;
    println!("same code: {replayed} history(ies) replay");
    let changed = Runtime::builder().workflow("pay", pay_renamed);
    match check_dir(changed, &histories).await {
        Err(e @ KitError::Incompatible { .. }) => println!("renamed step: {e}"),
        other => println!("renamed step: unexpectedly {other:?}"),
    }

    // 3. The crash matrix: crashed before each call and before the outcome, then recovered.
    let report = CrashMatrix::new(|| app(&fx))
        .effects(&fx)
        .run("pay", 12)
        .await?;
    println!("calls: {:?}", report.calls);
    print!("{report}");

    let _ = std::fs::remove_dir_all(&histories);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    Ok(())
}
