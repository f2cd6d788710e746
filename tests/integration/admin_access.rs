//! Who may call the admin endpoints: the token guards every one but the probes, and pages of
//! other sites can neither post forms to them nor reach them through a rebound DNS name.

use std::time::Duration;

use stead::admin::{self, AdminError, AdminOptions};
use stead::Status;

use crate::admin::{get, launch, post, serve, serving_a_pending, url, TOKEN};
use crate::common::http;

both_backends! {
async fn the_token_guards_every_endpoint_but_the_probes(db) {
    let rt = launch(&db, vec![]).await;
    let server = serve(&rt, AdminOptions::new().token(TOKEN)).await;

    for path in [
        "/api/workflows",
        "/api/queues",
        "/api/counts",
        "/api/throughput",
        "/metrics",
    ] {
        let none = get(&server, path).await;
        assert_eq!(none.status, 401, "{path}: {}", none.body);
        assert_eq!(none.header("www-authenticate"), Some("Bearer"));
        assert!(none.error().contains("token"), "{}", none.body);
        let wrong = http::get(&url(&server, path), Some("not-it")).await;
        assert_eq!(wrong.status, 401, "{path}");
    }
    let listed = http::get(&url(&server, "/api/workflows"), Some(TOKEN)).await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let cancel = post(&server, "/api/workflows/x/cancel", None).await;
    assert_eq!(cancel.status, 401);

    // The page takes the token once in its URL (a browser cannot send a header); the API
    // never does.
    let page = get(&server, "/").await;
    assert_eq!(page.status, 401);
    assert!(page.body.contains("<form"), "a form asks for the token");
    let page = get(&server, &format!("/?token={TOKEN}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("stead admin"));
    let by_query = get(&server, &format!("/api/workflows?token={TOKEN}")).await;
    assert_eq!(by_query.status, 401);

    let err = admin::serve(rt.client(), AdminOptions::new().token("has space"))
        .await
        .err();
    assert!(matches!(err, Some(AdminError::InvalidToken)), "{err:?}");
    let taken = admin::serve(rt.client(), AdminOptions::new().bind(server.local_addr()))
        .await
        .err();
    assert!(matches!(taken, Some(AdminError::Bind { .. })), "{taken:?}");
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(5)).await.unwrap();
}

async fn pages_of_other_sites_can_neither_post_forms_nor_rebind_dns(db) {
    let (rt, server) = serving_a_pending(&db, "s-2").await;

    // A cross-site form can only post urlencoded, multipart or plain text.
    let cancel = url(&server, "/api/workflows/s-2/cancel");
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let refused = http::request("POST", &cancel, &form, Some("x=1")).await;
    assert_eq!(refused.status, 415, "{}", refused.body);
    assert!(refused.error().contains("application/json"));
    let bare = http::request("POST", &cancel, &[], None).await;
    assert_eq!(bare.status, 415);
    assert_eq!(
        rt.client().handle("s-2").status().await.unwrap().status,
        Status::Pending
    );

    // A page whose DNS name was rebound to 127.0.0.1 sends its own name as the host.
    let listing = url(&server, "/api/workflows");
    let rebound = [("Host", "evil.example")];
    let refused = http::request("GET", &listing, &rebound, None).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let named = [("Host", "localhost:1")];
    assert_eq!(
        http::request("GET", &listing, &named, None).await.status,
        200
    );
    server.shutdown().await;
    rt.shutdown(Duration::from_secs(1)).await.unwrap();
}
}
