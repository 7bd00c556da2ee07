//! A WebDriver client for the console's tests: Debian's chromedriver
//! driving a headless Chromium over HTTP, with only what the tests click.

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// One HTTP/1.1 exchange with chromedriver, which keeps connections open:
/// the answer is read up to its `Content-Length`, not to the close.
fn exchange(addr: &str, method: &str, path: &str, body: &[u8]) -> Vec<u8> {
    use std::io::{BufRead, BufReader, Read};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to chromedriver");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut reader = BufReader::new(stream);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut answer = vec![0; length];
    reader
        .read_exact(&mut answer)
        .expect("chromedriver's answer");
    answer
}

/// chromedriver on a free port, killed when dropped.
pub(crate) struct Driver {
    child: Child,
    base: String,
    session: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.call("DELETE", "", json!(null));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    pub(crate) fn start(profile: &Path) -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let base = format!("127.0.0.1:{port}");
        // Ready when it answers its status (polling; no time assumed).
        while std::net::TcpStream::connect(&base).is_err() {
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut driver = Driver {
            child,
            base,
            session: String::new(),
        };
        let created = driver.call(
            "POST",
            "/session",
            json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": "/usr/bin/chromium",
                    "args": ["--headless", "--no-sandbox", "--disable-gpu",
                             "--window-size=1200,1400",
                             format!("--user-data-dir={}", profile.display())],
                }
            }}}),
        );
        driver.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        driver
    }

    /// One WebDriver command; its `value`.
    pub(crate) fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = if path.starts_with("/session") && self.session.is_empty() {
            path.to_string()
        } else {
            format!("/session/{}{path}", self.session)
        };
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let value: Value = serde_json::from_slice(&exchange(&self.base, method, &path, &body))
            .unwrap_or(Value::Null);
        value["value"].clone()
    }

    pub(crate) fn open(&self, url: &str) {
        self.call("POST", "/url", json!({"url": url}));
    }

    pub(crate) fn find(&self, css: &str) -> String {
        let found = self.call(
            "POST",
            "/element",
            json!({"using": "css selector", "value": css}),
        );
        found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_string()
    }

    pub(crate) fn type_into(&self, css: &str, text: &str) {
        let element = self.find(css);
        self.call(
            "POST",
            &format!("/element/{element}/value"),
            json!({"text": text}),
        );
    }

    pub(crate) fn click(&self, css: &str) {
        let element = self.find(css);
        self.call("POST", &format!("/element/{element}/click"), json!({}));
    }

    /// The page once it shows `text`: a click that submits a form returns
    /// before the next page has loaded, so the page is read until it does
    /// (polling; a page that never shows it fails the test with what it
    /// showed).
    pub(crate) fn page_showing(&self, text: &str) -> String {
        let mut page = self.page();
        for _ in 0..600 {
            if page.contains(text) {
                return page;
            }
            std::thread::sleep(Duration::from_millis(50));
            page = self.page();
        }
        panic!("the page never showed {text:?}:\n{page}");
    }

    pub(crate) fn page(&self) -> String {
        self.call("GET", "/source", json!(null))
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    pub(crate) fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let png = self.call("GET", "/screenshot", json!(null));
        base64::engine::general_purpose::STANDARD
            .decode(png.as_str().expect("a screenshot"))
            .expect("base64")
    }
}

impl Driver {
    /// Opens a new tab and makes it the current one; its handle.
    pub(crate) fn new_tab(&self) -> String {
        let opened = self.call("POST", "/window/new", json!({"type": "tab"}));
        let handle = opened["handle"]
            .as_str()
            .unwrap_or_else(|| panic!("no tab: {opened}"))
            .to_string();
        self.switch_to(&handle);
        handle
    }

    /// The current tab's handle.
    pub(crate) fn tab(&self) -> String {
        self.call("GET", "/window", json!(null))
            .as_str()
            .expect("a window handle")
            .to_string()
    }

    /// Makes the tab `handle` the current one.
    pub(crate) fn switch_to(&self, handle: &str) {
        self.call("POST", "/window", json!({"handle": handle}));
    }
}
