//! `ropelab hops`: the hop map of a number-task run as hops.csv, and bad input (a run of
//! another task, a missing run, a step that does not exist) as one-line errors.

mod common;

use common::{ok, refused, ropelab};

#[test]
fn hops_writes_the_map_and_refuses_other_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let run = |task: &str| {
        let path = dir.path().join(task).to_str().unwrap().to_owned();
        ok(ropelab(&[
            "train", "--task", task, "--preset", "tiny", "--steps", "4", "--out", &path,
        ]));
        path
    };
    let number = run("number");
    let out = ok(ropelab(&["hops", "--run", &number, "--n", "16"]));
    assert!(out.contains("ko j=4"), "{out}");
    assert!(
        out.contains("verdict: hops read from every position (mass >= 0.5)"),
        "{out}"
    );
    let csv = std::fs::read_to_string(std::path::Path::new(&number).join("hops.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "layer,head,from,j,edges,mass,accuracy,knockout_accuracy,knockout_per_hop,step,run"
    );
    // The tiny preset: 2 layers x 2 heads x (last, every) x j = 1..4.
    assert_eq!(lines.len(), 1 + 2 * 2 * 2 * 4, "{csv}");
    assert!(lines[1].starts_with("0,0,last,1,16,"), "{csv}");
    // The run's report draws the map.
    let page = dir.path().join("report.html");
    ok(ropelab(&[
        "report",
        &number,
        "--out",
        page.to_str().unwrap(),
    ]));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("hop map, which layer reads which hop"));
    assert!(html.contains("Hop map: hops read from every position"));
    assert!(html.contains("hop map from every position"));
    let letter = run("letter");
    refused(
        &["hops", "--run", &letter],
        "is a letter task run: the hop map follows the number task's offsets",
    );
    refused(&["hops", "--run", &number, "--step", "999"], "999");
    let missing = dir.path().join("nothing");
    refused(&["hops", "--run", missing.to_str().unwrap()], "nothing");
    // Linear attention's weights are no shares: no hop map and no attention view of them,
    // which the readers would call damaged (twenty-first pass, N3).
    let config = std::fs::read_to_string(std::path::Path::new(&number).join("config.toml"))
        .unwrap()
        .replace("attention = \"softmax\"", "attention = \"linear\"");
    assert!(config.contains("attention = \"linear\""), "{config}");
    let toml = dir.path().join("linear.toml");
    std::fs::write(&toml, config).unwrap();
    let linear = dir.path().join("linear");
    let l = linear.to_str().unwrap();
    ok(ropelab(&[
        "train",
        "--config",
        toml.to_str().unwrap(),
        "--out",
        l,
    ]));
    refused(&["hops", "--run", l, "--n", "8"], "its attention is linear");
    refused(&["attention", "--run", l], "its attention is linear");
    assert!(!linear.join("hops.csv").exists() && !linear.join("attention").exists());
}

#[test]
fn hops_hand_maps_the_hand_built_chains() {
    let dir = tempfile::tempdir().unwrap();
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let doubling = ok(ropelab(&[
        "hops",
        "--hand",
        "doubling",
        "--n",
        "64",
        "--out",
        &out("d.csv"),
    ]));
    assert!(
        doubling.contains("(3 layers), 64 test samples"),
        "{doubling}"
    );
    assert!(doubling.contains("accuracy 1.0000"), "{doubling}");
    assert!(
        doubling.contains("composes hops: L2 reads hop 4 where one hop per layer reaches 3"),
        "{doubling}"
    );
    let one = ok(ropelab(&[
        "hops",
        "--hand",
        "one-hop",
        "--n",
        "64",
        "--out",
        &out("o.csv"),
    ]));
    assert!(one.contains("L0:1 L1:2 L2:3 L3:4"), "{one}");
    assert!(one.contains("no composition"), "{one}");
    assert!(std::path::Path::new(&out("o.csv")).exists());
    refused(&["hops"], "--run");
    refused(&["hops", "--hand", "triple"], "triple");
}
