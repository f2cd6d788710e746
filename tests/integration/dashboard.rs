//! The dashboard in a real browser (headless Chromium through chromedriver): the page loads
//! with the token from its URL, lists a workflow the test started, shows queues, throughput
//! and a workflow's step timeline, a click on Cancel cancels the workflow, and clicks pause and
//! resume a workflow and a queue.

use std::time::Duration;

use serde_json::json;
use stead::admin::{self, AdminOptions};
use stead::{Context, Status, WorkflowOptions};

use crate::common;
use crate::common::browser::Browser;

const TOKEN: &str = "dash-token";

/// Takes a step, then sleeps a minute (a cancel interrupts the sleep).
async fn slow(ctx: Context, _: ()) -> stead::Result<()> {
    ctx.step("prepare", || async { Ok(7u32) }).await?;
    ctx.sleep(Duration::from_secs(60)).await
}

async fn quick(_ctx: Context, n: u32) -> stead::Result<u32> {
    Ok(n + 1)
}

async fn refuse(_ctx: Context, _: ()) -> Result<(), std::io::Error> {
    Err(std::io::Error::other("card declined"))
}

/// The status the page shows for workflow `arguments[0]`, once its row is there.
const ROW_STATUS: &str =
    "const row = document.querySelector(`tr[data-workflow-id=\"${arguments[0]}\"]`); \
     return row ? row.dataset.status : null;";

both_backends! {
async fn the_dashboard_lists_a_workflow_and_a_click_cancels_it(db) {
    require_browser!();
    let rt = common::builder(&db)
        .workflow("slow", slow)
        .workflow("quick", quick)
        .launch()
        .await
        .expect("launch");
    let done = rt
        .start("quick", 1u32, WorkflowOptions::with_id("quick-1"))
        .await
        .unwrap();
    assert_eq!(done.result::<u32>().await.unwrap(), 2);
    rt.start("slow", (), WorkflowOptions::with_id("slow-1"))
        .await
        .unwrap();
    let server = admin::serve(rt.client(), AdminOptions::new().token(TOKEN))
        .await
        .expect("serve");
    let browser = Browser::launch().await;

    browser
        .goto(&format!("{}/?token={TOKEN}", server.url()))
        .await;
    let shown = browser.wait_for(ROW_STATUS, json!(["slow-1"])).await;
    assert_eq!(shown, "PENDING", "the page lists the running workflow");
    let finished = browser.wait_for(ROW_STATUS, json!(["quick-1"])).await;
    assert_eq!(finished, "SUCCESS");
    // Each status chip counts the workflows in that status; the heading gives the total.
    let counts = browser
        .wait_for(
            "const c = (s) => document.querySelector(`[data-count=\"${s}\"]`).textContent; \
             const all = [c('PENDING'), c('SUCCESS'), c('ERROR'), \
                          document.querySelector('#workflow-count').textContent]; \
             return all[0] === '1' && all[1] === '1' ? all : null;",
            json!([]),
        )
        .await;
    assert_eq!(counts[2], "0", "{counts}");
    assert!(counts[3].as_str().unwrap().contains("of 2"), "{counts}");
    // The panels load apart: wait until the queues and the chart have theirs.
    let page = browser
        .wait_for(
            "const p = { banner: document.querySelector('#banner').hidden, \
                      queues: document.querySelectorAll('#queues tbody tr').length, \
                      chart: document.querySelectorAll('#throughput svg rect').length, \
                      health: document.querySelector('#health').textContent }; \
             return p.queues > 0 && p.chart > 0 ? p : null;",
            json!([]),
        )
        .await;
    assert_eq!(page["banner"], true, "no error shown: {page}");
    assert!(page["queues"].as_u64() >= Some(1), "{page}");
    assert!(page["chart"].as_u64() > Some(0), "{page}");
    assert_eq!(page["health"], "database ready");
    // The fleet panel: this executor, live (an embedded database keeps no roster).
    if !db.is_sqlite() {
        let ours = rt.client().list_executors().await.unwrap();
        let fleet = browser
            .wait_for(
                "const r = document.querySelector('#executors tbody tr'); \
                 return r ? [r.dataset.executor, r.querySelector('.pill').textContent] : null;",
                json!([]),
            )
            .await;
        assert_eq!(fleet, json!([ours[0].executor_id, "live"]));
    }

    // A row opens the workflow's timeline with its step and output.
    browser
        .click_css(r#"tr[data-workflow-id="slow-1"] td.id"#)
        .await;
    let step = browser
        .wait_for(
            "const s = document.querySelector('#timeline .step'); \
             return s ? s.textContent : null;",
            json!([]),
        )
        .await;
    assert!(step.as_str().unwrap().contains("prepare"), "{step}");
    // Its output is loaded when it is opened, and stays shown across refreshes.
    browser.click_css("#timeline .step summary").await;
    let output = browser
        .wait_for(
            "const o = document.querySelector('#timeline .step .step-output pre'); \
             return o ? o.textContent : null;",
            json!([]),
        )
        .await;
    assert_eq!(output, "7");
    let updated = browser
        .script("return document.querySelector('#updated').textContent;", json!([]))
        .await;
    let kept = browser
        .wait_for(
            "if (document.querySelector('#updated').textContent === arguments[0]) return null; \
             const o = document.querySelector('#timeline .step .step-output pre'); \
             return o ? o.textContent : 'closed';",
            json!([updated]),
        )
        .await;
    assert_eq!(kept, "7", "still open after a refresh");
    // The minute's sleep is shown as waiting, not as done with a future completion time.
    let sleeping = browser
        .wait_for(
            "const s = document.querySelector('#timeline .step.waiting'); \
             return s ? s.textContent : null;",
            json!([]),
        )
        .await;
    let sleeping = sleeping.as_str().unwrap();
    assert!(sleeping.contains("DBOS.sleep") && sleeping.contains("waiting, wakes in"), "{sleeping}");

    browser
        .click_css(r#"button[data-action="cancel"][data-id="slow-1"]"#)
        .await;
    common::wait::until_async("slow-1 cancelled by the click", Duration::from_millis(50), || async {
        rt.client().handle("slow-1").status().await.unwrap().status == Status::Cancelled
    })
    .await;
    let now = browser
        .wait_for(
            &format!(
                "const s = (() => {{ {ROW_STATUS} }})(); return s === 'CANCELLED' ? s : null;"
            ),
            json!(["slow-1"]),
        )
        .await;
    assert_eq!(now, "CANCELLED", "the page shows the new status");
    let cancelled = browser
        .wait_for(
            "const c = document.querySelector('[data-count=\"CANCELLED\"]').textContent; \
             return c === '1' ? c : null;",
            json!([]),
        )
        .await;
    assert_eq!(cancelled, "1", "the chip counts the cancel");

    browser.quit().await;
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// Takes two steps and returns.
async fn two_steps(ctx: Context, _: ()) -> stead::Result<u32> {
    let a = ctx.step("fetch", || async { Ok(20u32) }).await?;
    ctx.step("store", || async move { Ok(a + 1) }).await
}

both_backends! {
async fn mounted_under_admin_of_an_app_a_deep_link_opens_the_workflows_steps(db) {
    require_browser!();
    let rt = common::builder(&db)
        .workflow("two_steps", two_steps)
        .workflow("refuse", refuse)
        .launch()
        .await
        .expect("launch");
    let done = rt
        .start("two_steps", (), WorkflowOptions::with_id("deep 1/a"))
        .await
        .unwrap();
    assert_eq!(done.result::<u32>().await.unwrap(), 21);
    let failed = rt.start("refuse", (), WorkflowOptions::with_id("refused-1")).await.unwrap();
    assert!(failed.result::<()>().await.is_err());
    // The app of examples/dashboard.rs: a page of its own at `/`, stead's under `/admin`.
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "my service" }))
        .nest(
            "/admin",
            admin::router(rt.client(), AdminOptions::new().token(TOKEN)).unwrap(),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = tokio::spawn(async move { axum::serve(listener, app).await });
    let browser = Browser::launch().await;

    let link = format!(
        "http://{addr}/admin?token={TOKEN}#workflow/{}",
        "deep%201%2Fa"
    );
    browser.goto(&link).await;
    let steps = browser
        .wait_for(
            "const d = document.querySelector('#detail'); \
             const s = [...document.querySelectorAll('#timeline .step')]; \
             return d && !d.hidden && s.length === 2 \
               ? [document.querySelector('#detail-id').textContent, ...s.map((x) => x.textContent)] \
               : null;",
            json!([]),
        )
        .await;
    assert_eq!(steps[0], "deep 1/a", "{steps}");
    assert!(steps[1].as_str().unwrap().contains("fetch"), "{steps}");
    assert!(steps[2].as_str().unwrap().contains("store"), "{steps}");
    let page = browser
        .script(
            "return { banner: document.querySelector('#banner').hidden, \
                      health: document.querySelector('#health').textContent };",
            json!([]),
        )
        .await;
    assert_eq!(page["banner"], true, "the API answered under the prefix: {page}");
    assert_eq!(page["health"], "database ready");

    // The list previews the error as text; opening by id shows it in full, as text, and gives
    // the workflow its URL.
    let preview = browser
        .wait_for(
            "const c = document.querySelector('tr[data-workflow-id=\"refused-1\"] td.error-preview'); \
             return c && c.textContent ? c.textContent : null;",
            json!([]),
        )
        .await;
    assert!(preview.as_str().unwrap().contains("card declined"), "{preview}");
    browser
        .script(
            "const f = document.querySelector('#open-form'); f.elements.id.value = 'refused-1'; \
             f.requestSubmit(); return null;",
            json!([]),
        )
        .await;
    let opened = browser
        .wait_for(
            "const e = document.querySelector('#detail-meta .error-text'); \
             return document.querySelector('#detail-id').textContent === 'refused-1' && e \
               ? [e.textContent, location.hash] : null;",
            json!([]),
        )
        .await;
    assert!(opened[0].as_str().unwrap().contains("card declined"), "{opened}");
    assert!(!opened[0].as_str().unwrap().contains('{'), "text, not JSON: {opened}");
    assert_eq!(opened[1], "#workflow/refused-1");

    browser.quit().await;
    served.abort();
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}

/// The page's state of workflow `arguments[0]`: its row's status and whether it is paused,
/// once the row is there.
const ROW_PAUSE: &str =
    "const row = document.querySelector(`tr[data-workflow-id=\"${arguments[0]}\"]`); \
     return row ? [row.dataset.status, row.dataset.paused, \
       row.querySelector('td.status').textContent] : null;";

/// Waits until `id`'s row shows `paused` (`"true"`/`"false"`); returns [status, paused, label].
async fn row_paused(browser: &Browser, id: &str, paused: &str) -> serde_json::Value {
    browser
        .wait_for(
            &format!(
                "const r = (() => {{ {ROW_PAUSE} }})(); \
                 return r && r[1] === arguments[1] ? r : null;"
            ),
            json!([id, paused]),
        )
        .await
}

both_backends! {
async fn clicks_pause_and_resume_a_workflow_and_a_queue(db) {
    require_browser!();
    let rt = common::builder(&db)
        .workflow("slow", slow)
        .queue(stead::Queue::new("mail"))
        .launch()
        .await
        .expect("launch");
    rt.start("slow", (), WorkflowOptions::with_id("slow-p"))
        .await
        .unwrap();
    let server = admin::serve(rt.client(), AdminOptions::new().token(TOKEN))
        .await
        .expect("serve");
    let browser = Browser::launch().await;
    browser
        .goto(&format!("{}/?token={TOKEN}", server.url()))
        .await;
    let shown = browser.wait_for(ROW_STATUS, json!(["slow-p"])).await;
    assert_eq!(shown, "PENDING");

    // Pause: the run stops in its sleep and waits on its queue, shown as PAUSED.
    browser
        .click_css(r#"button[data-action="pause"][data-id="slow-p"]"#)
        .await;
    let row = row_paused(&browser, "slow-p", "true").await;
    assert_eq!(row[2], "PAUSED", "{row}");
    assert!(rt.client().handle("slow-p").status().await.unwrap().is_paused());
    let stored = browser
        .wait_for(
            &("const r = (() => { ".to_owned() + ROW_PAUSE + " })(); \
             return r && r[0] === 'ENQUEUED' ? r[0] : null;"),
            json!(["slow-p"]),
        )
        .await;
    assert_eq!(stored, "ENQUEUED", "the stored status stays DBOS's");

    // Resume: it runs again (back in its sleep), no longer paused.
    browser
        .click_css(r#"button[data-action="resume"][data-id="slow-p"]"#)
        .await;
    let row = row_paused(&browser, "slow-p", "false").await;
    assert_ne!(row[2], "PAUSED", "{row}");
    common::wait::until_async("slow-p running again", Duration::from_millis(50), || async {
        let s = rt.client().handle("slow-p").status().await.unwrap();
        s.status == Status::Pending && !s.is_paused()
    })
    .await;

    // The queue panel pauses and resumes a queue.
    let queue_button = r#"button[data-queue="mail"]"#;
    let label = browser
        .wait_for(
            &format!("const b = document.querySelector('{queue_button}'); \
                      return b ? b.textContent : null;"),
            json!([]),
        )
        .await;
    assert_eq!(label, "Pause");
    browser.click_css(queue_button).await;
    let label = browser
        .wait_for(
            &format!("const b = document.querySelector('{queue_button}'); \
                      return b && b.textContent === 'Resume' ? b.textContent : null;"),
            json!([]),
        )
        .await;
    assert_eq!(label, "Resume");
    let paused = rt.client().paused_queues().await.unwrap();
    assert_eq!(paused.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["mail"]);
    browser.click_css(queue_button).await;
    browser
        .wait_for(
            &format!("const b = document.querySelector('{queue_button}'); \
                      return b && b.textContent === 'Pause' ? b.textContent : null;"),
            json!([]),
        )
        .await;
    assert!(rt.client().paused_queues().await.unwrap().is_empty());

    browser.quit().await;
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}
