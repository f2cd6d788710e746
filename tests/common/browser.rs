//! Headless Chromium driven through chromedriver (W3C WebDriver, JSON over HTTP), for tests of
//! the dashboard. Debian's `chromium` and `chromium-driver` packages, installed by
//! `.ci/test-deps`. Each browser gets a fresh profile directory; dropping it (also when a test fails)
//! ends the session, so chromedriver closes Chromium, then kills chromedriver.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::http;
use super::wait;
use super::KillOnDrop;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The W3C key under which an element reference is returned.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A WebDriver session on a headless Chromium.
pub struct Browser {
    base: String,
    session: String,
    profile: PathBuf,
    ended: bool,
    _driver: KillOnDrop,
}

/// Checks Chromium and chromedriver are installed (`.ci/test-deps` installs them; the tests never
/// do). `Err` says what is missing; outside CI a test skips on it, in CI it must fail.
pub fn locate() -> Result<(), String> {
    for path in [CHROMIUM, CHROMEDRIVER] {
        if !Path::new(path).exists() {
            return Err(format!("{path} is missing; run .ci/test-deps"));
        }
    }
    Ok(())
}

impl Browser {
    /// Starts chromedriver on a free port and opens a headless Chromium session.
    pub async fn launch() -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let driver = KillOnDrop(driver);
        let base = format!("http://127.0.0.1:{port}");
        wait_ready(&base).await;
        let profile = std::env::temp_dir().join(format!(
            "stead-chromium-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,900",
        ];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let capabilities = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args },
        }}});
        let created = call(&base, "POST", "/session", Some(capabilities)).await;
        let session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_owned();
        Browser {
            base,
            session,
            profile,
            ended: false,
            _driver: driver,
        }
    }

    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.session);
        call(&self.base, method, &path, body).await
    }

    /// Opens `url` and waits for the page to load.
    pub async fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })))
            .await;
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn script(&self, script: &str, args: Value) -> Value {
        let body = json!({ "script": script, "args": args });
        self.command("POST", "/execute/sync", Some(body)).await
    }

    /// Runs `script` until it returns something other than `null` or `false`: a progress wait
    /// (the page refreshing onto new state), bounded by [`wait::SETUP`].
    pub async fn wait_for(&self, script: &str, args: Value) -> Value {
        let deadline = Instant::now() + wait::SETUP;
        loop {
            let got = self.script(script, args.clone()).await;
            if !got.is_null() && got != Value::Bool(false) {
                return got;
            }
            assert!(Instant::now() < deadline, "timed out waiting for: {script}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The element matching the CSS selector, as a WebDriver reference.
    pub async fn find(&self, css: &str) -> String {
        let body = json!({ "using": "css selector", "value": css });
        let found = self.command("POST", "/element", Some(body)).await;
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned()
    }

    /// Clicks an element the way a user would (it must be visible and enabled).
    pub async fn click(&self, element: &str) {
        self.command(
            "POST",
            &format!("/element/{element}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Finds the element matching `css` and clicks it as a user would; the page re-renders as it
    /// refreshes, so an element gone stale between the two is found again (a few times).
    pub async fn click_css(&self, css: &str) {
        for _ in 0..5 {
            let element = self.find(css).await;
            let path = format!("/session/{}/element/{element}/click", self.session);
            let headers = [("Content-Type", "application/json")];
            let url = format!("{}{path}", self.base);
            let response = http::request("POST", &url, &headers, Some("{}")).await;
            let stale = response.json()["value"]["error"] == "stale element reference";
            if !stale {
                assert_eq!(response.status, 200, "POST {path}: {}", response.json());
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{css} went stale at every click");
    }

    /// Ends the session (chromedriver is killed when the browser is dropped).
    pub async fn quit(mut self) {
        self.command("DELETE", "", None).await;
        self.ended = true;
    }
}

impl Drop for Browser {
    /// A failed test never reaches `quit`: end the session here, blocking (no runtime to await
    /// on), or Chromium would outlive its killed chromedriver.
    fn drop(&mut self) {
        if !self.ended {
            end_session_blocking(&self.base, &self.session);
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

fn end_session_blocking(base: &str, session: &str) {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(base.trim_start_matches("http://")) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let request = format!(
        "DELETE /session/{session} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_ok() {
        // The answer comes once the browser has quit; its content does not matter.
        let _ = stream.read(&mut [0u8; 1024]);
    }
}

async fn wait_ready(base: &str) {
    let deadline = Instant::now() + wait::SETUP;
    loop {
        let up = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
            .await
            .is_ok();
        if up && call(base, "GET", "/status", None).await["ready"] == true {
            return;
        }
        assert!(Instant::now() < deadline, "chromedriver did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One WebDriver command; returns its `value`, panicking on a WebDriver error.
async fn call(base: &str, method: &str, path: &str, body: Option<Value>) -> Value {
    let text = body.map(|b| b.to_string());
    let headers = [("Content-Type", "application/json")];
    let response = http::request(method, &format!("{base}{path}"), &headers, text.as_deref()).await;
    let reply = response.json();
    assert_eq!(response.status, 200, "{method} {path}: {reply}");
    reply["value"].clone()
}
