//! `ropelab report` on a tiny trained, scored and length-tested run, and on a run with nothing
//! but its training: one self-contained page, every expected section, nothing fetched.

mod common;

use common::{ok, ropelab};
use std::path::Path;

/// Every `src=`, `href=` and CSS `url(` value of `html`.
fn references(html: &str) -> Vec<String> {
    let mut out = vec![];
    for key in ["src=\"", "href=\"", "url("] {
        for (at, _) in html.match_indices(key) {
            let rest = &html[at + key.len()..];
            let end = rest.find(['"', ')']).unwrap_or(rest.len());
            out.push(rest[..end].to_owned());
        }
    }
    out
}

fn assert_self_contained(html: &str) {
    for r in references(html) {
        assert!(r.starts_with('#'), "external reference {r:?}");
    }
    assert!(!html.contains("<script src"), "a script is loaded");
    assert!(!html.contains("<link"), "a stylesheet is loaded");
}

#[test]
fn the_report_of_a_scored_run_holds_every_figure_inline() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    ok(ropelab(&[
        "train", "--task", "number", "--preset", "tiny", "--steps", "20", "--out", run_s,
    ]));
    ok(ropelab(&["score", "--run", run_s, "--samples", "8"]));
    ok(ropelab(&[
        "lengthgen",
        "--run",
        run_s,
        "--extras",
        "0,8",
        "--n",
        "8",
    ]));
    let shown = ok(ropelab(&["attention", "--run", run_s, "--sample", "1"]));
    assert!(shown.contains("attention/step-20-sample-1.json"), "{shown}");
    assert!(shown.contains("top key"), "{shown}");
    let stdout = ok(ropelab(&["report", run_s]));
    assert!(stdout.contains("report.html"), "{stdout}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert_self_contained(&html);
    // The viewer's data and its inline script.
    assert_eq!(html.matches("class=\"attn\"").count(), 1);
    assert_eq!(html.matches("<script>").count(), 1);
    for id in [
        "contents",
        "run-dynamics",
        "run-length",
        "run-attention",
        "about",
    ] {
        assert!(
            html.contains(&format!("id=\"{id}\"")),
            "section {id} missing"
        );
    }
    // Seven dynamics figures (with the frequency-use map and the head-type grids at the last
    // checkpoint and over training) and two length figures (accuracy, the heads'
    // discrepancy), inline.
    assert_eq!(html.matches("<svg").count(), 9);
    assert!(html.contains("head types over training"));
    assert!(!html.contains("not run"), "a figure is missing");
    // The page names its inputs: the config and the command.
    assert!(html.contains("preset = &quot;tiny&quot;"));
    assert!(html.contains("ropelab report"));
}

#[test]
fn missing_inputs_are_listed_as_not_run_and_bad_directories_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    ok(ropelab(&[
        "train", "--task", "letter", "--preset", "tiny", "--steps", "2", "--out", run_s,
    ]));
    let out = dir.path().join("page.html");
    ok(ropelab(&["report", run_s, "--out", out.to_str().unwrap()]));
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.contains("not run: scores.jsonl is missing"));
    assert!(html.contains("not run: lengthgen.csv is missing"));
    assert!(html.contains("not run: attention/*.json is missing"));
    // A bad attention request is one line naming the problem.
    for (args, message) in [
        (vec!["--sample", "100000000"], "past the test split"),
        (vec!["--step", "1"], "no checkpoint at step 1"),
    ] {
        let out = ropelab(&[&["attention", "--run", run_s][..], &args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(message), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    assert_self_contained(&html);

    let missing = ropelab(&["report", dir.path().join("nothing").to_str().unwrap()]);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("is not a directory"), "{err}");
    assert!(!Path::new(&dir.path().join("nothing")).exists());
}

#[test]
fn plot_writes_one_figure_and_names_a_missing_input() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    ok(ropelab(&[
        "train", "--task", "number", "--preset", "tiny", "--steps", "10", "--out", run_s,
    ]));
    ok(ropelab(&["score", "--run", run_s, "--samples", "4"]));
    for kind in ["accuracy", "purity", "s-pos", "s-sym", "frequency"] {
        let out = dir.path().join(format!("{kind}.svg"));
        ok(ropelab(&[
            "plot",
            kind,
            "--dir",
            run_s,
            "--out",
            out.to_str().unwrap(),
        ]));
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{kind}"
        );
    }
    let out = dir.path().join("length.svg");
    let missing = ropelab(&[
        "plot",
        "length",
        "--dir",
        run_s,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("lengthgen.csv is missing"), "{err}");
    assert!(!out.exists());
    // A folder that does not exist is named so, not as one holding no output (eighteenth
    // pass, RO9).
    let gone = dir.path().join("gone");
    for kind in ["accuracy", "pretrained-tasks"] {
        let missing = ropelab(&[
            "plot",
            kind,
            "--dir",
            gone.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&missing.stderr);
        assert!(err.contains("gone is not a directory"), "{kind}: {err}");
    }
    let bad = ropelab(&["plot", "nonsense", "--dir", run_s, "--out", "x.svg"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("choose one of"));
}

/// A directory holding nothing ropelab reads (an empty one, a checkpoint) is not reported as
/// a run whose every section is "not run" (sixth pass, S7).
#[test]
fn a_directory_that_is_no_run_is_not_reported_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let html = dir.path().join("r.html");
    common::refused(
        &[
            "report",
            empty.to_str().unwrap(),
            "--out",
            html.to_str().unwrap(),
        ],
        "is not a run, study, sweep or experiment directory",
    );
    assert!(!html.exists());
}

/// A report written into another run's directory would stand there as that run's report:
/// refused, and that run's own page is left as it was (eighth pass, W021); a run's own
/// directory and a path outside any ropelab directory are fine.
#[test]
fn a_report_into_another_runs_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for run in [&a, &b] {
        ok(common::train_tiny("number", "4", run, &[]));
        ok(ropelab(&["report", run.to_str().unwrap()]));
    }
    // One whose pretrained/ holds a model's table is still named as a run, not as that
    // model's output (eighteenth pass, RO1).
    std::fs::create_dir_all(b.join("pretrained")).unwrap();
    std::fs::write(
        b.join("pretrained/tasks.csv"),
        "task,size,prompt_tokens,mean,sd,runs,precision,model\n",
    )
    .unwrap();
    let page = std::fs::read(b.join("report.html")).unwrap();
    let refusal = ropelab(&[
        "report",
        a.to_str().unwrap(),
        "--out",
        b.join("report.html").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&refusal.stderr);
    assert!(
        !refusal.status.success()
            && err.contains("another ropelab directory")
            && !err.contains("pretrained"),
        "{err}"
    );
    assert_eq!(std::fs::read(b.join("report.html")).unwrap(), page);
    // A figure too (ninth pass, S9).
    common::refused(
        &[
            "plot",
            "accuracy",
            "--dir",
            a.to_str().unwrap(),
            "--out",
            b.join("accuracy.svg").to_str().unwrap(),
        ],
        "another ropelab directory",
    );
    assert!(!b.join("accuracy.svg").exists());
    let outside = dir.path().join("pages/a.html");
    ok(ropelab(&[
        "report",
        a.to_str().unwrap(),
        "--out",
        outside.to_str().unwrap(),
    ]));
    assert!(outside.is_file());
    // A folder of `ropelab pretrained` output (no marker file) is one model's: a run's page
    // there would replace its report (ninth pass, F12l).
    let model = dir.path().join("model-results");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(
        model.join("tasks.csv"),
        "task,size,prompt_tokens,mean,sd,runs,n,precision,model\n\
         number,12,82,0.5,0.1414213562,0.4;0.6,10,f32,m.gguf sha256:0123456789abcdef\n",
    )
    .unwrap();
    ok(ropelab(&["report", model.to_str().unwrap()]));
    let page = std::fs::read(model.join("report.html")).unwrap();
    common::refused(
        &[
            "report",
            a.to_str().unwrap(),
            "--out",
            model.join("report.html").to_str().unwrap(),
        ],
        "holds `ropelab pretrained` output",
    );
    assert_eq!(std::fs::read(model.join("report.html")).unwrap(), page);
    // A folder whose only table is unreadable bytes holds no pretrained output: a page may
    // go there (thirteenth pass, U3).
    let junk = dir.path().join("junk-folder");
    std::fs::create_dir_all(&junk).unwrap();
    std::fs::write(junk.join("junk.csv"), [0xffu8, 0xfe, 0x00, 0x9c, b'\n']).unwrap();
    ok(ropelab(&[
        "report",
        a.to_str().unwrap(),
        "--out",
        junk.join("new.html").to_str().unwrap(),
    ]));
    assert!(junk.join("new.html").is_file());
    // A user's own file, whatever its name, is not replaced by a page or a table (tenth pass,
    // LO1, LO2); a page rewrites its own earlier page under the same odd name.
    for name in ["notes.txt", "notes.md", "keep.py", "NOTES"] {
        for place in [&a, &model, &dir.path().to_path_buf()] {
            let target = place.join(name);
            std::fs::write(&target, "my own notes\n").unwrap();
            common::refused(
                &[
                    "report",
                    a.to_str().unwrap(),
                    "--out",
                    target.to_str().unwrap(),
                ],
                if place == &model {
                    "holds `ropelab pretrained` output"
                } else {
                    "another kind of file"
                },
            );
            assert_eq!(std::fs::read_to_string(&target).unwrap(), "my own notes\n");
        }
    }
    let odd = dir.path().join("page.txt");
    ok(ropelab(&[
        "report",
        a.to_str().unwrap(),
        "--out",
        odd.to_str().unwrap(),
    ]));
    ok(ropelab(&[
        "report",
        a.to_str().unwrap(),
        "--out",
        odd.to_str().unwrap(),
    ]));
}

/// Measurement files copied from another run (another task and seed) are refused by the
/// report and by `ablate`, naming the file, instead of being read as this run's (eighth pass,
/// a164, R002).
#[test]
fn another_runs_measurements_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for (run, task, seed) in [(&a, "number", "0"), (&b, "letter", "7")] {
        ok(common::train_tiny(task, "6", run, &["--seed", seed]));
    }
    ok(ropelab(&[
        "score",
        "--run",
        b.to_str().unwrap(),
        "--samples",
        "4",
    ]));
    ok(ropelab(&[
        "lengthgen",
        "--run",
        b.to_str().unwrap(),
        "--extras",
        "0,4",
        "--n",
        "4",
    ]));
    for file in ["scores.jsonl", "lengthgen.csv"] {
        std::fs::copy(b.join(file), a.join(file)).unwrap();
        let html = dir.path().join("r.html");
        common::refused(
            &[
                "report",
                a.to_str().unwrap(),
                "--out",
                html.to_str().unwrap(),
            ],
            "was measured on another run",
        );
        assert!(!html.exists());
        std::fs::remove_file(a.join(file)).unwrap();
    }
    std::fs::copy(b.join("scores.jsonl"), a.join("scores.jsonl")).unwrap();
    let table = dir.path().join("ab.csv");
    common::refused(
        &[
            "ablate",
            "--run",
            a.to_str().unwrap(),
            "--n",
            "4",
            "--out",
            table.to_str().unwrap(),
        ],
        "was measured on another run",
    );
    // The run's own measurements read as before.
    ok(ropelab(&["report", b.to_str().unwrap()]));
    // With their `run` removed, the files cannot be told apart from another run's: refused
    // (ninth pass).
    let scores = std::fs::read_to_string(b.join("scores.jsonl")).unwrap();
    let stripped: String = scores
        .lines()
        .map(|line| {
            let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
            v.as_object_mut().unwrap().remove("run").unwrap();
            v.to_string() + "\n"
        })
        .collect();
    std::fs::write(b.join("scores.jsonl"), stripped).unwrap();
    common::refused(
        &["report", b.to_str().unwrap()],
        "does not name the run it was measured on",
    );
    std::fs::write(b.join("scores.jsonl"), scores).unwrap();
    let lengths = std::fs::read_to_string(b.join("lengthgen.csv")).unwrap();
    let cut: String = lengths
        .lines()
        .map(|line| line.rsplit_once(',').unwrap().0.to_owned() + "\n")
        .collect();
    std::fs::write(b.join("lengthgen.csv"), cut).unwrap();
    common::refused(
        &["report", b.to_str().unwrap()],
        "does not name the run it was measured on",
    );
    std::fs::write(b.join("lengthgen.csv"), lengths).unwrap();
    // An edited config.toml is named as the edit, not blamed on the measured files (ninth
    // pass, w10).
    let config = std::fs::read_to_string(b.join("config.toml")).unwrap();
    let edited = config.replace("dropout = 0.1", "dropout = 0.2");
    assert_ne!(edited, config);
    std::fs::write(b.join("config.toml"), edited).unwrap();
    common::refused(
        &["report", b.to_str().unwrap()],
        "config.toml says model.dropout = 0.2 but checkpoint",
    );
}

/// A temperature whose reciprocal overflows (a subnormal tau) is refused, not scored into a
/// table of NaN, and `score` never writes a line its readers would refuse (tenth pass, S4, U3).
#[test]
fn a_tau_with_no_reciprocal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    ok(common::train_tiny("number", "4", &run, &[]));
    let r = run.to_str().unwrap();
    for tau in ["1e-320", "inf", "0", "-1e-3"] {
        common::refused(
            &[
                "score",
                "--run",
                r,
                "--samples",
                "4",
                &format!("--tau={tau}"),
            ],
            "tau must be finite and at least",
        );
    }
    assert!(!run.join("scores.jsonl").exists());
    ok(ropelab(&[
        "score",
        "--run",
        r,
        "--samples",
        "4",
        "--tau",
        "1e-300",
    ]));
    ok(ropelab(&["report", r]));
}

/// The length test of a run extended after it was measured is drawn with its step and marked
/// as older than the run, in the report and in `plot length` (tenth pass, S5).
#[test]
fn a_length_test_older_than_the_run_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let r = run.to_str().unwrap();
    ok(common::train_tiny("number", "10", &run, &[]));
    ok(ropelab(&[
        "lengthgen",
        "--run",
        r,
        "--extras",
        "0,4",
        "--n",
        "4",
    ]));
    ok(ropelab(&["report", r]));
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(page.contains("at step 10") && !page.contains("older than"));
    ok(ropelab(&["train", "--resume", "--steps", "20", "--out", r]));
    ok(ropelab(&["report", r]));
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(
        page.contains("at step 10, older than the run") && page.contains("latest step 20"),
        "the stale length test is not marked"
    );
    let svg = dir.path().join("length.svg");
    ok(ropelab(&[
        "plot",
        "length",
        "--dir",
        r,
        "--out",
        svg.to_str().unwrap(),
    ]));
    let figure = std::fs::read_to_string(&svg).unwrap();
    assert!(figure.contains("older than"), "{figure}");
    // An older checkpoint's attention too (eleventh pass, at04).
    ok(ropelab(&["attention", "--run", r, "--step", "10"]));
    ok(ropelab(&["report", r]));
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(page.contains("Attention at step 10, older than the run"));
}

/// A head scored twice at one step (a concatenated or damaged scores.jsonl) is refused by
/// its readers, not counted twice (tenth pass, SILENT-2).
#[test]
fn a_head_scored_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let r = run.to_str().unwrap();
    ok(common::train_tiny("number", "4", &run, &[]));
    ok(ropelab(&["score", "--run", r, "--samples", "4"]));
    let text = std::fs::read_to_string(run.join("scores.jsonl")).unwrap();
    std::fs::write(run.join("scores.jsonl"), text.repeat(2)).unwrap();
    common::refused(&["report", r], "is scored twice");
    common::refused(&["pure-heads", "--dir", r], "is scored twice");
    // A head the model does not have, or a step missing a head (twelfth pass, S1).
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut extra = lines.last().unwrap().clone();
    extra["layer"] = serde_json::json!(5);
    let joined = |lines: &[serde_json::Value]| -> String {
        lines.iter().map(|l| l.to_string() + "\n").collect()
    };
    let mut with_extra = lines.clone();
    with_extra.push(extra);
    std::fs::write(run.join("scores.jsonl"), joined(&with_extra)).unwrap();
    common::refused(&["report", r], "is no head of the model");
    lines.pop();
    std::fs::write(run.join("scores.jsonl"), joined(&lines)).unwrap();
    common::refused(&["pure-heads", "--dir", r], "but the model has 4");
    std::fs::write(run.join("scores.jsonl"), &text).unwrap();
    // A training log with a step twice, and a length test with a row twice (S2, S3).
    let log = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let last = log.lines().last().unwrap().to_owned();
    std::fs::write(run.join("metrics.jsonl"), format!("{log}{last}\n")).unwrap();
    common::refused(&["pure-heads", "--dir", r], "one line per step");
    std::fs::write(run.join("metrics.jsonl"), &log).unwrap();
    ok(ropelab(&[
        "lengthgen",
        "--run",
        r,
        "--extras",
        "0,4",
        "--n",
        "4",
    ]));
    let lengths = std::fs::read_to_string(run.join("lengthgen.csv")).unwrap();
    let row = lengths.lines().last().unwrap().to_owned();
    std::fs::write(run.join("lengthgen.csv"), format!("{lengths}{row}\n")).unwrap();
    common::refused(&["report", r], "is measured twice");
}
