//! The crash matrix (feature `testing`): a three-step payment recovers at every call boundary
//! with each effect done once; an effect done outside a step is caught at the first boundary
//! after it, and passes once declared idempotent; a failing workflow's error survives recovery.
//! The matrix runs on temporary SQLite files of its own (no harness database).

use stead::testing::{CrashMatrix, Effects, Problem};
use stead::{Context, Runtime, RuntimeBuilder};

/// Reserve, charge, then a receipt: every effect inside a step.
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

/// A bug: the confirmation email is sent between two steps, outside any.
async fn pay_emailing(ctx: Context, amount: u32, fx: Effects) -> stead::Result<String> {
    let fx = &fx;
    ctx.step("reserve", || async {
        fx.hit("reserve");
        Ok(())
    })
    .await?;
    fx.hit("email");
    let charge: String = ctx
        .step("charge", || async {
            fx.hit("charge");
            Ok(format!("ch-{amount}"))
        })
        .await?;
    Ok(charge)
}

/// The charge behind a patch: its marker is a boundary too.
async fn pay_patched(ctx: Context, amount: u32, fx: Effects) -> stead::Result<String> {
    let fx = &fx;
    ctx.step("reserve", || async {
        fx.hit("reserve");
        Ok(())
    })
    .await?;
    let step = if ctx.patch("card").await? {
        "charge-card"
    } else {
        "charge"
    };
    ctx.step(step, || async {
        fx.hit("charge");
        Ok(format!("ch-{amount}"))
    })
    .await
}

/// Declines after reserving: the outcome is an error.
async fn pay_declined(ctx: Context, _amount: u32, fx: Effects) -> stead::Result<String> {
    let fx = &fx;
    ctx.step("reserve", || async {
        fx.hit("reserve");
        Ok(())
    })
    .await?;
    ctx.sleep(std::time::Duration::from_millis(1)).await?;
    Err(stead::Error::InvalidArgument("card declined".into()))
}

type Body = fn(Context, u32, Effects) -> futures::future::BoxFuture<'static, stead::Result<String>>;

/// A build function registering `body` as `pay`, counting into `fx`.
fn build(body: Body, fx: &Effects) -> impl Fn() -> RuntimeBuilder {
    let fx = fx.clone();
    move || {
        let fx = fx.clone();
        Runtime::builder().workflow("pay", move |ctx, amount| body(ctx, amount, fx.clone()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_recovers_at_every_boundary_with_each_effect_once() {
    let fx = Effects::new();
    let report = CrashMatrix::new(build(|c, a, f| Box::pin(pay(c, a, f)), &fx))
        .effects(&fx)
        .run("pay", 12)
        .await
        .unwrap();
    assert_eq!(report.calls, ["reserve", "charge", "receipt"]);
    assert_eq!(report.outcome, "\"ch-12\"");
    assert_eq!(
        report.effects.values().copied().collect::<Vec<_>>(),
        [1, 1, 1]
    );
    assert_eq!(
        report.boundaries.len(),
        4,
        "before each call and before the outcome"
    );
    assert!(report.is_ok(), "{report}");
    let last = report.boundaries.last().unwrap().to_string();
    assert!(
        last.contains("after call #3 \"receipt\", before the outcome"),
        "{last}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_outside_a_step_is_reported_at_the_boundary_where_it_repeats() {
    let fx = Effects::new();
    let body: Body = |c, a, f| Box::pin(pay_emailing(c, a, f));
    let report = CrashMatrix::new(build(body, &fx))
        .effects(&fx)
        .run("pay", 7)
        .await
        .unwrap();
    assert!(!report.is_ok());
    // A crash before the first step is harmless; from the second call on, the email repeats.
    let broken: Vec<usize> = report
        .boundaries
        .iter()
        .filter(|b| !b.problems.is_empty())
        .map(|b| b.index)
        .collect();
    assert_eq!(broken, [1, 2]);
    let first = report.first_failure().unwrap();
    assert_eq!(first.after.as_deref(), Some("reserve"));
    assert_eq!(first.before.as_deref(), Some("charge"));
    assert_eq!(
        first.problems,
        [Problem::Effect {
            name: "email".into(),
            expected: 1,
            found: 2
        }]
    );
    assert!(report.to_string().contains("boundary 1 (after call #1 \"reserve\", before call #2 \"charge\"): effect \"email\" happened 2 time(s), not 1"), "{report}");

    // Declared idempotent, the repeat is allowed; the steps still ran once each.
    let report = CrashMatrix::new(build(body, &fx))
        .effects(&fx)
        .idempotent("email")
        .run("pay", 7)
        .await
        .unwrap();
    assert!(report.is_ok(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_workflow_fails_the_same_way_after_recovery() {
    let fx = Effects::new();
    let report = CrashMatrix::new(build(|c, a, f| Box::pin(pay_declined(c, a, f)), &fx))
        .effects(&fx)
        .run("pay", 1)
        .await
        .unwrap();
    assert_eq!(report.calls, ["reserve", "DBOS.sleep"]);
    assert!(
        report.outcome.contains("card declined"),
        "{}",
        report.outcome
    );
    assert!(report.is_ok(), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patch_marker_is_a_boundary_and_recovers_on_the_new_branch() {
    let fx = Effects::new();
    let report = CrashMatrix::new(build(|c, a, f| Box::pin(pay_patched(c, a, f)), &fx))
        .effects(&fx)
        .run("pay", 3)
        .await
        .unwrap();
    assert_eq!(report.calls, ["reserve", "DBOS.patch-card", "charge-card"]);
    assert_eq!(report.boundaries.len(), 4);
    assert!(report.is_ok(), "{report}");
}
