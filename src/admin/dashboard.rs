//! The dashboard: one HTML page with its style and script inlined, shipped in the crate (no
//! build step, no external resources). It reads the JSON endpoints and refreshes itself; it
//! holds no data of its own.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::IntoResponse;

const HTML: &str = include_str!("dashboard/index.html");
const STYLE: &str = include_str!("dashboard/style.css");
const SCRIPT: &str = include_str!("dashboard/app.js");

/// The page, assembled once: one response, so the token check covers everything it needs.
static PAGE: LazyLock<String> = LazyLock::new(|| {
    HTML.replace("/*STYLE*/", STYLE)
        .replace("/*SCRIPT*/", SCRIPT)
});

/// `GET /`
pub(super) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE.as_str(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_inlines_its_style_and_script_and_loads_nothing_else() {
        assert!(!PAGE.contains("/*STYLE*/") && !PAGE.contains("/*SCRIPT*/"));
        assert!(PAGE.contains("refresh"));
        for external in ["http://", "https://", "src=\"/", "href=\"/"] {
            assert!(!PAGE.contains(external), "{external}");
        }
    }
}
