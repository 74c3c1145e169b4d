//! `ropelab ablate`: a scored number/letter run's head groups knocked out, as ablation.csv and
//! a report section; bad input (an unscored run, a missing run) as one-line errors.

mod common;

use common::{ok, refused, ropelab};

#[test]
fn ablate_writes_the_groups_and_refuses_an_unscored_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("number").to_str().unwrap().to_owned();
    ok(ropelab(&[
        "train", "--task", "number", "--preset", "tiny", "--steps", "4", "--out", &run,
    ]));
    refused(
        &["ablate", "--run", &run, "--n", "16"],
        "scores.jsonl has no line of the last checkpoint (step 4)",
    );
    ok(ropelab(&["score", "--run", &run, "--samples", "8"]));
    let out = ok(ropelab(&["ablate", "--run", &run, "--n", "16"]));
    assert!(
        out.contains("16 test samples; heads typed at gamma 0.1"),
        "{out}"
    );
    assert!(out.contains("(intact)") && out.contains("layer 1"), "{out}");
    let csv = std::fs::read_to_string(std::path::Path::new(&run).join("ablation.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "group,heads,ablation,hop,n,correct,accuracy,step,run"
    );
    assert!(lines[1].starts_with("none,,none,all,16,"), "{csv}");
    // The tiny preset: 2 layers x 2 heads, so each layer and each head is a group, each by
    // mean and zero ablation, each with an `all` row and one per hop count present.
    for group in ["layer 0,0.0 0.1,mean,all", "head 1.1,1.1,zero,all"] {
        assert!(csv.contains(group), "{group}: {csv}");
    }
    let page = dir.path().join("report.html");
    ok(ropelab(&["report", &run, "--out", page.to_str().unwrap()]));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("what the model needs (ablation)"));
    assert!(html.contains("test accuracy with a group mean-ablated"));
    let missing = dir.path().join("nothing");
    refused(&["ablate", "--run", missing.to_str().unwrap()], "nothing");
    refused(&["ablate", "--run", &run, "--gamma", "0.7"], "gamma");
    // A language run has no heads typed by swap scores: the refusal names the run.
    let language = dir.path().join("language").to_str().unwrap().to_owned();
    ok(ropelab(&[
        "train", "--task", "language", "--preset", "tiny", "--steps", "2", "--out", &language,
    ]));
    refused(
        &["ablate", "--run", &language],
        &format!("{language}: the language task has no multi-hop layout"),
    );
}
