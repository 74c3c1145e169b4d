//! The report as a real browser renders it: headless Chromium opens a tiny run's report from
//! `file://` (network off: nothing to fetch), logs no console error, and its full-page
//! screenshot is not blank. Needs Chromium (`chromium` on PATH or `$ROPELAB_CHROMIUM`), so it
//! is ignored by default; `.ci/run` installs Debian's `chromium` and runs it with `--ignored`.

mod common;

use common::{ok, ropelab};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
    for id in ["contents", "run-dynamics", "run-length", "about"] {
        assert!(
            html.contains(&format!("id=\"{id}\"")),
            "section {id} not rendered"
        );
    }
    assert_eq!(html.matches("<svg").count(), 7, "figures rendered");
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
