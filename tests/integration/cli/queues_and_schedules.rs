//! Queues and schedules with the binary: queues listed, paused and resumed; schedules listed,
//! paused and resumed.

use super::*;

both_backends! {
async fn queues_are_listed_and_schedules_listed_paused_and_resumed(db) {
    let rt = builder(&db).launch().await.unwrap();
    let url = db.url.as_str();

    let queues = ok(url, &["queue", "list"]).await;
    let row = queues.lines().find(|l| l.starts_with("q ")).expect(&queues);
    let cells: Vec<&str> = row.split_whitespace().collect();
    // The runtime defines its queues under its application name, `stead` by default.
    assert_eq!(cells, ["q", "stead", "-", "2", "10/1000ms", "no", "no", "100ms", "no"]);
    // Paused and resumed for the fleet, shown in the listing.
    assert_eq!(ok(url, &["queue", "pause", "q"]).await, "paused queue 'q'\n");
    assert_eq!(ok(url, &["queue", "pause", "q"]).await, "queue 'q' was already paused\n");
    let listed = json(url, &["queue", "list"]).await;
    assert_eq!(listed[0]["paused"], Value::from(true), "{listed}");
    assert!(listed[0]["paused_at_ms"].is_i64(), "{listed}");
    assert_eq!(rt.client().paused_queues().await.unwrap().len(), 1);
    assert_eq!(ok(url, &["queue", "resume", "q"]).await, "resumed queue 'q'\n");
    assert!(rt.client().paused_queues().await.unwrap().is_empty());
    let queues = json(url, &["queue", "list"]).await;
    let q = &queues.as_array().unwrap()[0];
    assert_eq!(
        (&q["name"], &q["worker_concurrency"]),
        (&Value::from("q"), &Value::from(2))
    );
    assert_eq!(q["rate_limit"]["limit"], 10);
    assert_eq!(q["concurrency"], Value::Null);
    // Every application's queues without --app; with it, that application's and shared ones.
    let other = common::client(&db, "billing-app").await;
    other.create_queue(Queue::new("invoices")).await.unwrap();
    let all = ok(url, &["queue", "list"]).await;
    let row = all.lines().find(|l| l.starts_with("invoices ")).expect(&all);
    assert_eq!(row.split_whitespace().nth(1), Some("billing-app"), "{all}");
    let theirs = json(url, &["--app", "billing-app", "queue", "list"]).await;
    let names: Vec<&str> = theirs.as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["invoices"]);
    let mine = json(url, &["-a", "stead", "queue", "list"]).await;
    let names: Vec<&str> = mine.as_array().unwrap().iter().map(|q| q["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["q"]);
    other.shutdown(Duration::from_secs(5)).await.unwrap();

    let table = ok(url, &["schedule", "list"]).await;
    let row = table.lines().nth(1).expect(&table);
    assert!(row.starts_with("yearly"), "{table}");
    for cell in ["ACTIVE", "report", "0 0 3 1 1 *", "UTC"] {
        assert!(row.contains(cell), "{cell}: {table}");
    }
    assert_eq!(
        ok(url, &["schedule", "pause", "yearly"]).await,
        "paused schedule 'yearly'\n"
    );
    assert_eq!(
        rt.client().schedules().await.unwrap()[0].status,
        ScheduleStatus::Paused
    );
    let listed = json(url, &["schedule", "list"]).await;
    assert_eq!(
        (&listed[0]["name"], &listed[0]["status"]),
        (&Value::from("yearly"), &Value::from("PAUSED"))
    );
    ok(url, &["schedule", "resume", "yearly"]).await;
    assert_eq!(
        rt.client().schedules().await.unwrap()[0].status,
        ScheduleStatus::Active
    );

    let r = stead(url, &["schedule", "pause", "nope"]).await;
    assert_eq!(failed(&r, 3), "error: schedule \"nope\" not found");

    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}
}
