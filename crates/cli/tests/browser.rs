//! The report as a real browser renders it: headless Chromium opens a tiny run's report from
//! `file://` (network off: nothing to fetch), logs no console error, its full-page screenshot
//! is not blank, and the attention viewer follows a real mouse hover (driven through the
//! DevTools protocol). Needs Chromium (`chromium` on PATH or `$ROPELAB_CHROMIUM`), so it
//! is ignored by default; `.ci/run` installs Debian's `chromium` and runs it with `--ignored`.

mod common;

use common::{ok, ropelab};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("ROPELAB_CHROMIUM") {
        return PathBuf::from(p);
    }
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(PathBuf::from)
        .expect("Chromium is installed (chromium on PATH, or ROPELAB_CHROMIUM)")
}

/// Headless Chromium on `page` with `args`; its output.
fn headless(page: &Path, profile: &Path, args: &[&str]) -> Output {
    Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs")
}

#[test]
#[ignore = "needs Chromium; run by .ci/run"]
fn the_report_renders_in_a_headless_browser() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    ok(ropelab(&[
        "train", "--task", "letter", "--preset", "tiny", "--steps", "30", "--out", run_s,
    ]));
    ok(ropelab(&["score", "--run", run_s, "--samples", "8"]));
    ok(ropelab(&[
        "lengthgen",
        "--run",
        run_s,
        "--extras",
        "0,16,64",
        "--n",
        "16",
    ]));
    ok(ropelab(&["attention", "--run", run_s, "--sample", "2"]));
    ok(ropelab(&["report", run_s]));
    let page = std::fs::canonicalize(run.join("report.html")).unwrap();
    let profile = dir.path().join("profile");

    // The DOM as rendered: every section and figure is there.
    let dom = headless(&page, &profile, &["--dump-dom"]);
    let html = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    for id in [
        "contents",
        "run-dynamics",
        "run-length",
        "run-attention",
        "about",
    ] {
        assert!(
            html.contains(&format!("id=\"{id}\"")),
            "section {id} not rendered"
        );
    }
    assert_eq!(html.matches("<svg").count(), 9, "figures rendered");
    let log = String::from_utf8_lossy(&dom.stderr);
    for line in log.lines().filter(|l| l.contains("CONSOLE")) {
        assert!(!line.to_lowercase().contains("error"), "console: {line}");
    }
    assert!(!log.contains("net::ERR_"), "a resource was fetched: {log}");

    // The screenshot is not blank: the figures' many colours and anti-aliased text.
    let shot = dir.path().join("report.png");
    let out = headless(
        &page,
        &profile,
        &[
            "--window-size=1200,2600",
            &format!("--screenshot={}", shot.display()),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    let colours: std::collections::HashSet<&[u8]> =
        pixels[..info.buffer_size()].chunks(channels).collect();
    assert!(
        colours.len() > 200,
        "only {} distinct colours",
        colours.len()
    );
    if let Some(keep) = std::env::var_os("ROPELAB_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

/// A headless Chromium driven through the DevTools protocol over its page's WebSocket.
struct Browser {
    child: Child,
    socket: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<std::net::TcpStream>>,
    next_id: u64,
    /// Every event received so far (console calls, exceptions).
    events: Vec<Value>,
}

impl Browser {
    /// Opens `page` with remote debugging on a free port (read from DevToolsActivePort).
    fn open(page: &Path, profile: &Path) -> Browser {
        let child = Command::new(chromium())
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--window-size=1200,900",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("file://{}", page.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        let port_file = profile.join("DevToolsActivePort");
        let mut port = None;
        for _ in 0..300 {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                if let Some(p) = text
                    .lines()
                    .next()
                    .and_then(|l| l.trim().parse::<u16>().ok())
                {
                    port = Some(p);
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let port = port.expect("chromium wrote DevToolsActivePort");
        // The page's WebSocket address from the target list (one HTTP/1.1 GET).
        // The target showing our file (it can be about:blank for a moment first).
        let mut url = None;
        for _ in 0..300 {
            let targets = http_get_json(port, "/json/list");
            url = targets
                .as_array()
                .into_iter()
                .flatten()
                .find(|t| {
                    t["type"] == "page" && t["url"].as_str().is_some_and(|u| u.starts_with("file:"))
                })
                .and_then(|t| t["webSocketDebuggerUrl"].as_str().map(str::to_owned));
            if url.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let url = url.expect("a page target showing the report");
        let (socket, _) = tungstenite::connect(url.as_str()).expect("the page's WebSocket");
        let mut browser = Browser {
            child,
            socket,
            next_id: 0,
            events: vec![],
        };
        browser.call("Runtime.enable", json!({}));
        browser
    }

    /// Sends a command and returns its result (events seen on the way are kept).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.socket
            .send(tungstenite::Message::Text(msg))
            .expect("send");
        loop {
            let reply = self.socket.read().expect("a reply");
            let tungstenite::Message::Text(text) = reply else {
                continue;
            };
            let v: Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
            self.events.push(v);
        }
    }

    /// Polls `expression` until it is true (up to 30 s); panics naming `what` if it never is.
    fn wait_for(&mut self, expression: &str, what: &str) {
        for _ in 0..600 {
            if self.eval(expression) == json!(true) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {what} ({expression})");
    }

    /// The value of a JavaScript expression in the page.
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        assert!(r.get("exceptionDetails").is_none(), "{expression}: {r}");
        r["result"]["value"].clone()
    }
}

/// The JSON body of `GET path` on the DevTools HTTP endpoint (read by its Content-Length:
/// Chromium keeps the connection open).
fn http_get_json(port: u16, path: &str) -> Value {
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut bytes = vec![];
    let mut buf = [0u8; 4096];
    loop {
        let head_end = bytes.windows(4).position(|w| w == b"\r\n\r\n");
        if let Some(end) = head_end {
            let head = String::from_utf8_lossy(&bytes[..end]).to_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if bytes.len() >= end + 4 + length {
                return serde_json::from_slice(&bytes[end + 4..end + 4 + length])
                    .unwrap_or(json!([]));
            }
        }
        let n = tcp.read(&mut buf).unwrap();
        if n == 0 {
            return json!([]);
        }
        bytes.extend_from_slice(&buf[..n]);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The viewer's colour of attention weight `w`, as the page writes it (white to dark blue).
fn css_colour(w: f64) -> String {
    let t = w.clamp(0.0, 1.0);
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    format!(
        "rgb({}, {}, {})",
        mix(255.0, 8.0),
        mix(255.0, 48.0),
        mix(255.0, 107.0)
    )
}

#[test]
#[ignore = "needs Chromium; run by .ci/run"]
fn the_attention_viewer_follows_the_mouse() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    ok(ropelab(&[
        "train", "--task", "number", "--preset", "tiny", "--steps", "20", "--out", run_s,
    ]));
    ok(ropelab(&["attention", "--run", run_s]));
    ok(ropelab(&["report", run_s]));
    let page = std::fs::canonicalize(run.join("report.html")).unwrap();
    let view_file = std::fs::read_dir(run.join("attention"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let view: Value = serde_json::from_str(&std::fs::read_to_string(view_file).unwrap()).unwrap();
    let n = view["tokens"].as_array().unwrap().len();

    let mut browser = Browser::open(&page, &dir.path().join("profile"));
    // The first page target can still be about:blank (itself "complete") while the report
    // loads: wait for the report's own document, fully loaded.
    browser.wait_for(
        "location.protocol === 'file:' && document.readyState === 'complete' \
         && document.querySelector('.attn') !== null",
        "the report loaded with its attention viewer",
    );
    let query =
        |b: &mut Browser| b.eval("document.querySelector('.attn').getAttribute('data-query')");
    assert_eq!(
        query(&mut browser),
        json!((n - 1).to_string()),
        "drawn for the task's query"
    );

    // Move the mouse over token 3 of the input strip, as a user would.
    let target = 3;
    let centre = browser.eval(&format!(
        "(function () {{ var t = document.querySelector('.attn-strip .tok[data-pos=\"{target}\"]');
           t.scrollIntoView({{block: 'center'}}); var r = t.getBoundingClientRect();
           return [r.left + r.width / 2, r.top + r.height / 2]; }})()"
    ));
    let (x, y) = (centre[0].as_f64().unwrap(), centre[1].as_f64().unwrap());
    browser.call(
        "Input.dispatchMouseEvent",
        json!({"type": "mouseMoved", "x": x, "y": y}),
    );
    assert_eq!(
        query(&mut browser),
        json!(target.to_string()),
        "the hovered token is the query"
    );

    // Every head's row now shows its attention from the hovered token: the weights of the
    // file for keys 0..=3, the masked colour after it.
    let drawn = browser.eval(
        "Array.prototype.map.call(document.querySelectorAll('.attn-head'), function (row) {
           return Array.prototype.map.call(row.querySelectorAll('.cell'),
             function (c) { return c.style.background; }); })",
    );
    let heads = view["heads"].as_array().unwrap();
    assert_eq!(drawn.as_array().unwrap().len(), heads.len());
    for (head, row) in heads.iter().zip(drawn.as_array().unwrap()) {
        let weights = head["pattern"][target].as_array().unwrap();
        for (k, cell) in row.as_array().unwrap().iter().enumerate() {
            let expected = match weights.get(k) {
                Some(w) => css_colour(w.as_f64().unwrap()),
                None => "rgb(238, 238, 238)".to_owned(),
            };
            assert_eq!(cell.as_str().unwrap(), expected, "key {k}");
        }
    }
    let errors: Vec<&Value> = browser
        .events
        .iter()
        .filter(|e| {
            e["method"] == "Runtime.exceptionThrown"
                || (e["method"] == "Runtime.consoleAPICalled" && e["params"]["type"] == "error")
        })
        .collect();
    assert!(errors.is_empty(), "script errors: {errors:?}");
}
