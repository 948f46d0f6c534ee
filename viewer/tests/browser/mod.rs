//! A real browser for the page tests: Debian's `chromium`, headless, driven over WebDriver
//! by the `fantoccini` client through Debian's `chromedriver` (package `chromium-driver`;
//! `scripts/test` installs both), which the test starts on 127.0.0.1 and a port it picks
//! itself (`--port=0`, read from its first lines). Also `ostm-viewer watch` started and its
//! URL read. Screenshots go to `target/tmp/watch-screenshots/`.
#![allow(dead_code)]

use fantoccini::{Client, ClientBuilder, Locator};
use ostm_testkit::{Proc, LIMIT};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The first of `paths` that exists, else the panic naming the package.
fn installed(what: &str, env: &str, paths: &[&str], package: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    paths
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| {
            panic!(
                "{what} is not installed: run scripts/test, which installs {package}, or set {env}"
            )
        })
}

/// Where screenshots are kept.
pub fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("watch-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

/// A headless Chromium session; the driver is killed when dropped.
pub struct Browser {
    pub client: Client,
    _driver: Proc,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium `width` x `height` pixels.
    pub async fn start(width: u32, height: u32) -> Browser {
        Browser::start_nice(width, height, 0).await
    }

    /// [`Browser::start`] with chromedriver and the browser `nice` steps down (0: as this
    /// process).
    pub async fn start_nice(width: u32, height: u32, nice: u32) -> Browser {
        let chromium = installed(
            "chromium",
            "CHROMIUM",
            &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
            "chromium",
        );
        let driver_bin = installed(
            "chromedriver",
            "CHROMEDRIVER",
            &["/usr/bin/chromedriver"],
            "chromium-driver",
        );
        let mut cmd = Command::new("nice");
        cmd.arg("-n")
            .arg(nice.to_string())
            .arg(driver_bin)
            .arg("--port=0");
        let mut driver = Proc::spawn(&mut cmd);
        let line = driver.wait_line(|l| l.contains("started successfully on port"));
        let port: u16 = line
            .trim_end_matches('.')
            .rsplit(' ')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        let caps = serde_json::json!({
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--no-first-run",
                    format!("--window-size={width},{height}")],
            }
        });
        let serde_json::Value::Object(caps) = caps else {
            unreachable!()
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session with headless chromium");
        Browser {
            client,
            _driver: driver,
        }
    }

    /// Runs `js` (a function body; `arguments` are `args`) and returns its value.
    pub async fn js(&self, js: &str) -> serde_json::Value {
        self.client
            .execute(js, vec![])
            .await
            .unwrap_or_else(|e| panic!("{js}: {e}"))
    }

    /// Evaluates `js` every 100 ms until `pred` holds for its value; returns that value.
    ///
    /// # Panics
    /// Not within [`LIMIT`].
    pub async fn until(
        &self,
        what: &str,
        js: &str,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + LIMIT;
        let mut last = serde_json::Value::Null;
        while Instant::now() < deadline {
            last = self.js(js).await;
            if pred(&last) {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{what}: not within {LIMIT:?}; last value {last}");
    }

    /// Clicks the element `css`.
    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap_or_else(|e| panic!("click {css}: {e}"));
    }

    /// The text of the element `css`.
    pub async fn text(&self, css: &str) -> String {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .text()
            .await
            .unwrap_or_else(|e| panic!("text of {css}: {e}"))
    }

    /// Saves a screenshot of the window as `NAME.png` under [`screenshots`].
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let path = screenshots().join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }

    /// The process id of chromedriver, whose children are the browser's processes.
    pub fn driver_pid(&self) -> u32 {
        self._driver.pid()
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// `ostm-viewer watch ARGS`, started, with the URL it prints first.
pub fn watch(args: &[&str]) -> (Proc, String) {
    let mut p = Proc::spawn(
        Command::new(env!("CARGO_BIN_EXE_ostm-viewer"))
            .arg("watch")
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("OSTM_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            ),
    );
    let first = p.line().expect("the URL first");
    // With --json: {"event":"ui","url":...}.
    let url = match serde_json::from_str::<serde_json::Value>(&first) {
        Ok(v) => v["url"].as_str().unwrap_or_default().to_string(),
        Err(_) => first,
    };
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    (p, url)
}

/// The page's state the tests read (`window.ostm`, page.js), less each frame's SVG.
pub const STATE: &str = "const s = window.ostm; if (!s.frame) return null; \
    return {step: s.frame.step, check: s.frame.check, world: s.frame.world, \
    overlay: s.frame.overlay, alive: s.frame.alive, drawn: s.drawn, fps: s.fps, \
    mode: s.mode, ended: s.ended, drift: s.drift, errors: s.errors, \
    shown_live: document.getElementById('live-count').textContent, \
    svg_bodies: document.querySelectorAll('#picture svg g.body').length, \
    svg_step: document.querySelector('#picture svg').getAttribute('data-step')};";
