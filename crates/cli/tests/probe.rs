//! `ropelab probe`: the residual-stream probes of a number-task run as probes.csv with a
//! verdict per source and its layer sets as layer_sets.csv, and bad input (another task, a missing run, one sample) as one-line
//! errors.

mod common;

use common::{ok, refused, ropelab};

#[test]
fn probe_writes_the_table_and_refuses_other_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let run = |task: &str| {
        let path = dir.path().join(task).to_str().unwrap().to_owned();
        ok(ropelab(&[
            "train", "--task", task, "--preset", "tiny", "--steps", "4", "--out", &path,
        ]));
        path
    };
    let number = run("number");
    let out = ok(ropelab(&["probe", "--run", &number, "--n", "64"]));
    assert!(out.contains("from the last token: "), "{out}");
    assert!(out.contains("from every position: "), "{out}");
    assert!(out.contains("verdict: "), "{out}");
    let csv = std::fs::read_to_string(std::path::Path::new(&number).join("probes.csv")).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "from,stream,target,j,n_train,n_test,unseen,test_samples,accuracy,chance,control,step,run"
    );
    assert!(lines[1].starts_with("last,0,token,1,"), "{csv}");
    // The layer sets beside them: every set of fewer moving layers than the 4 hops.
    assert!(out.contains("layer sets ("), "{out}");
    let sets =
        std::fs::read_to_string(std::path::Path::new(&number).join("layer_sets.csv")).unwrap();
    assert!(
        sets.starts_with("moving,size,hop,n,correct,accuracy,step,run\nnone,0,"),
        "{sets}"
    );
    let letter = run("letter");
    refused(&["probe", "--run", &letter], "is a letter task run");
    refused(&["probe", "--run", &number, "--n", "1"], "1");
    let missing = dir.path().join("nothing");
    refused(&["probe", "--run", missing.to_str().unwrap()], "nothing");
}
