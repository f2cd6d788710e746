//! W5, the cost of history: `seed-history` writes `--history` finished workflows (`--steps`
//! steps each) with set-based SQL (`benches/seed_history.sql`); `w5` keeps an empty and a
//! seeded template database and runs W1, W2 and W3 on a fresh copy of each per round (`CREATE
//! DATABASE .. TEMPLATE`), alternating which goes first, then again on the same copy after
//! `--settle` more workflows, and reports the medians side by side.
//!
//! **A template copy per round, not per run.** `CREATE DATABASE .. TEMPLATE` of the seeded 4.7 GB
//! database takes 18–34 s here (`FILE_COPY`; `WAL_LOG` writes it all to the WAL), the empty one
//! under a second; W1, W2 and W3 in one round add ~3,000 rows to a million, so each round copies
//! each template once and runs the three on the copy.
//!
//! **Fresh and settled.** A freshly vacuumed history can hold a free tail on every page that new
//! rows fit, and the first rows after it fill those tails one page each, once. Fresh shows that
//! transient; settled (after `--settle` workflows on each copy, the same on both templates) shows
//! what the history costs from then on. Both are reported, side by side (`benches/README.md`, "W5:
//! the fill happens once").

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{json, Value};

use crate::{child_with, median, recreate, Args};

const SEED: &str = include_str!("../seed_history.sql");
/// Workflows per seeding statement: big enough to be set-based, small enough to report progress.
const BATCH: u64 = 100_000;

/// The workloads W5 reruns and their figures (higher is better for both but W1's µs/step).
const RUNS: [(&str, &[&str], &str); 3] = [
    ("w1", &["--steps", "1000"], "us_per_step"),
    ("w2", &["--n", "1000", "--steps", "10"], "wf_per_s"),
    ("w3", &["--n", "2000", "--steps", "1"], "wf_per_s"),
];

async fn admin(db: &str) -> Result<(sqlx::PgPool, String, String), Box<dyn std::error::Error>> {
    let (server, name) = db.rsplit_once('/').ok_or("--db must name a database")?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&format!("{server}/postgres"))
        .await?;
    Ok((pool, server.to_owned(), name.to_owned()))
}

async fn exec(pool: &sqlx::PgPool, sql: String) -> Result<(), sqlx::Error> {
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(pool)
        .await
        .map(|_| ())
}

/// Recreates `a.db` migrated and holding `a.history` finished workflows.
pub async fn seed(a: &Args) -> Result<Value, Box<dyn std::error::Error>> {
    recreate(&a.db).await?;
    child_with("migrate", &a.db, &[])?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&a.db)
        .await?;
    let t = Instant::now();
    let mut lo = 1;
    while lo <= a.history {
        let hi = (lo + BATCH - 1).min(a.history);
        let sql = SEED
            .replace("{n}", &a.history.to_string())
            .replace("{lo}", &lo.to_string())
            .replace("{hi}", &hi.to_string())
            .replace("{steps}", &a.steps.to_string());
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&pool)
            .await?;
        eprintln!("seeded {hi} in {:.0} s", t.elapsed().as_secs_f64());
        lo = hi + 1;
    }
    let seed_s = t.elapsed().as_secs_f64();
    exec(&pool, "VACUUM ANALYZE".into()).await?;
    let size: String =
        sqlx::query_scalar("SELECT pg_size_pretty(pg_database_size(current_database()))")
            .fetch_one(&pool)
            .await?;
    pool.close().await;
    Ok(
        json!({"peer": "stead", "workload": "seed-history", "history": a.history,
              "steps": a.steps, "seed_s": seed_s, "total_s": t.elapsed().as_secs_f64(),
              "size": size}),
    )
}

/// Finished workflows in `db` (0 when it does not exist or is not migrated).
async fn seeded_count(db: &str) -> i64 {
    let Ok(pool) = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(db)
        .await
    else {
        return 0;
    };
    let n = sqlx::query_scalar("SELECT count(*) FROM dbos.workflow_status")
        .fetch_one(&pool)
        .await
        .unwrap_or(0);
    pool.close().await;
    n
}

/// Runs per template and phase: `figures[(phase, template)][workload]`.
type Figures = BTreeMap<(&'static str, &'static str), BTreeMap<&'static str, Vec<f64>>>;

/// Times W1, W2 and W3 on the copy at `a.db`, filing each figure under `phase` and `label`.
fn measure(
    a: &Args,
    phase: &'static str,
    label: &'static str,
    figures: &mut Figures,
) -> Result<(), Box<dyn std::error::Error>> {
    for (workload, flags, key) in RUNS {
        let r = child_with(workload, &a.db, flags)?;
        let v = r[key].as_f64().ok_or(format!("{workload} gave no {key}"))?;
        eprintln!("w5 {phase} {label} {workload}: {key} {v:.1}");
        figures
            .entry((phase, label))
            .or_default()
            .entry(workload)
            .or_default()
            .push(v);
    }
    Ok(())
}

/// Runs `n` W2-shaped workflows (10 steps) on the copy, 1,000 per process, untimed: the traffic
/// that fills the free tails a freshly vacuumed history leaves on its pages.
fn settle(a: &Args, n: u64) -> Result<(), Box<dyn std::error::Error>> {
    let mut left = n;
    while left > 0 {
        let batch = left.min(1000).to_string();
        child_with("w2", &a.db, &["--n", &batch, "--steps", "10"])?;
        left = left.saturating_sub(1000);
    }
    Ok(())
}

/// How much slower `s` is than `e`, in percent (negative: faster).
fn slower_pct(key: &str, e: f64, s: f64) -> f64 {
    if key == "us_per_step" {
        (s - e) / e * 100.0
    } else {
        (e - s) / e * 100.0
    }
}

/// The median per workload for one phase, empty against seeded; the settled seeded copy is also
/// set against the fresh empty one, which holds no history at all.
fn table(figures: &Figures, phase: &'static str) -> Vec<Value> {
    let mut rows = Vec::new();
    for (workload, _, key) in RUNS {
        let runs = |phase, label| figures[&(phase, label)][workload].clone();
        let (e, s) = (median(runs(phase, "empty")), median(runs(phase, "seeded")));
        let mut row = json!({"workload": workload, "figure": key, "empty": e, "seeded": s,
                             "slower_pct": slower_pct(key, e, s),
                             "runs_empty": runs(phase, "empty"),
                             "runs_seeded": runs(phase, "seeded")});
        if phase == "settled" {
            let fresh_empty = median(runs("fresh", "empty"));
            row["slower_than_fresh_empty_pct"] = json!(slower_pct(key, fresh_empty, s));
        }
        rows.push(row);
    }
    rows
}

/// W5: `--rounds` rounds of W1, W2, W3 on a copy of the empty and of the seeded template,
/// measured right after the copy (`table`) and again after `--settle` more workflows on the
/// same copy (`settled_table`).
pub async fn run(a: &Args) -> Result<Value, Box<dyn std::error::Error>> {
    let (admin, server, name) = admin(&a.db).await?;
    let (empty, seeded) = (format!("{name}_empty"), format!("{name}_seeded"));
    let seeded_url = format!("{server}/{seeded}");
    if seeded_count(&seeded_url).await != a.history as i64 {
        let seeding = Args {
            db: seeded_url.clone(),
            ..a.clone()
        };
        eprintln!("w5: seeding {seeded}: {}", seed(&seeding).await?);
    }
    recreate(&format!("{server}/{empty}")).await?;
    child_with("migrate", &format!("{server}/{empty}"), &[])?;
    let settle_n = a.settle.unwrap_or(a.history / 25);
    let mut figures = Figures::new();
    // Seconds per template: making the copy, and settling it.
    let mut copies: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut settles: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for round in 0..a.rounds {
        let order = if round % 2 == 0 {
            [("empty", &empty), ("seeded", &seeded)]
        } else {
            [("seeded", &seeded), ("empty", &empty)]
        };
        for (label, template) in order {
            // One copy per round and template: a copy of the seeded one takes tens of
            // seconds, and the workloads add a few percent to a million.
            exec(
                &admin,
                format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            )
            .await?;
            let t = Instant::now();
            let copy = format!("CREATE DATABASE {name} TEMPLATE {template} STRATEGY FILE_COPY");
            exec(&admin, copy).await?;
            // The copy's writes are flushed before the timed runs, not during them.
            exec(&admin, "CHECKPOINT".to_owned()).await?;
            copies
                .entry(label)
                .or_default()
                .push(t.elapsed().as_secs_f64());
            eprintln!("w5 round {round}: copied {label}");
            measure(a, "fresh", label, &mut figures)?;
            if settle_n > 0 {
                let t = Instant::now();
                settle(a, settle_n)?;
                settles
                    .entry(label)
                    .or_default()
                    .push(t.elapsed().as_secs_f64());
                exec(&admin, "CHECKPOINT".to_owned()).await?;
                measure(a, "settled", label, &mut figures)?;
            }
        }
    }
    exec(
        &admin,
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    )
    .await?;
    let mut result = json!({"peer": "stead", "workload": "w5", "history": a.history,
        "rounds": a.rounds, "settle": settle_n, "table": table(&figures, "fresh"),
        "copy_s_empty": median(copies["empty"].clone()),
        "copy_s_seeded": median(copies["seeded"].clone())});
    if settle_n > 0 {
        result["settled_table"] = json!(table(&figures, "settled"));
        result["settle_s_empty"] = json!(median(settles["empty"].clone()));
        result["settle_s_seeded"] = json!(median(settles["seeded"].clone()));
    }
    Ok(result)
}
