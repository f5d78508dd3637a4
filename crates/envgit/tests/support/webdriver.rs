//! A tiny WebDriver client (W3C protocol, JSON over HTTP/1.1 on loopback) for Debian's
//! headless chromium through chromedriver: sessions, navigation, finding elements, text,
//! clicks, running a script, screenshots. Enough for the UI tests and the paint benchmark,
//! without an async runtime.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// chromium and chromedriver, if this machine has them (`None` says why not).
pub fn available() -> Result<(), String> {
    for bin in ["chromium", "chromedriver"] {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
            .unwrap_or(false);
        if !found {
            return Err(format!(
                "{bin} is not installed (apt-get install -y chromium chromium-driver)"
            ));
        }
    }
    Ok(())
}

pub struct Driver {
    child: Child,
    port: u16,
}

pub struct Session<'a> {
    driver: &'a Driver,
    id: String,
}

impl Driver {
    /// Starts chromedriver on a free loopback port and waits until it says it is ready.
    pub fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let driver = Driver { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(v) = driver.call("GET", "/status", None)
                && v["value"]["ready"] == true
            {
                return driver;
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not become ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
        // chromedriver keeps the connection open whatever the request says: read the head,
        // then exactly Content-Length bytes.
        let mut reader = BufReader::new(s);
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err("the connection closed in the head".into());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().map_err(|_| "bad Content-Length")?;
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body).map_err(|e| e.to_string())?;
        serde_json::from_slice(&body)
            .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&body)))
    }

    /// A headless chromium session with a fixed window size.
    pub fn session(&self) -> Session<'_> {
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,900"]
            }
        }}});
        let v = self.call("POST", "/session", Some(&caps)).unwrap();
        let id = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {v}"))
            .to_owned();
        Session { driver: self, id }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Session<'_> {
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{path}", self.id);
        let v = self
            .driver
            .call(
                method,
                &path,
                body.as_ref()
                    .or(Some(&json!({})))
                    .filter(|_| method == "POST"),
            )
            .unwrap();
        if let Some(err) = v["value"]["error"].as_str() {
            panic!(
                "webdriver {method} {path}: {err}: {}",
                v["value"]["message"]
            );
        }
        v["value"].clone()
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body; `arguments` are `args`) and returns its value.
    pub fn run(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Runs `script` asynchronously: it ends by calling its last argument with the value.
    pub fn run_async(&self, script: &str, args: Value) -> Value {
        self.call(
            "POST",
            "/execute/async",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Waits until `css` matches an element, and returns its id.
    pub fn wait_for(&self, css: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v = self.call(
                "POST",
                "/elements",
                Some(json!({ "using": "css selector", "value": css })),
            );
            if let Some(e) = v.as_array().and_then(|a| a.first()) {
                // The W3C reference is an object with one key (the web element identifier).
                let id = e
                    .as_object()
                    .and_then(|o| o.values().next())
                    .and_then(Value::as_str);
                return id
                    .unwrap_or_else(|| panic!("not an element: {e}"))
                    .to_owned();
            }
            assert!(Instant::now() < deadline, "no element matches {css}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn text(&self, element: &str) -> String {
        self.call("GET", &format!("/element/{element}/text"), None)
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    pub fn click(&self, element: &str) {
        self.call("POST", &format!("/element/{element}/click"), None);
    }

    /// The page as a PNG.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let b64 = self.call("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        let _ = self
            .driver
            .call("DELETE", &format!("/session/{}", self.id), None);
    }
}
