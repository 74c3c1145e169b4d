//! A study per head count (`n_heads = [1, 4]`, docs/multihead.md): each count runs as its own
//! study, `heads.csv` compares them, the report draws every model's head-type grid, and bad head
//! counts are one-line errors.

mod common;

use common::{ok, refused, ropelab};

/// A study per head count, small enough for a test: one seed, a tiny model, 5 steps.
const HEADS_STUDY: &str =
    "name = \"heads\"\nseeds = [3]\n[tasks]\ntrain = 300\nval = 20\ntest = 40\n\
     target_window = 8\npre_window = 8\nhops = [1, 2, 3, 4]\n\
     [train]\npreset = \"tiny\"\nsteps = 5\nd_model = 16\nn_heads = [1, 4]\n\
     [score]\nsamples = 10\n\
     [lengthgen]\nextras = [0, 20]\nsamples = 8\n\
     [theory]\nmax_n = 50\nd = 8\nbases = [100.0]\nlengths = [64]\ndraws = 2\nrho = 0.5\n";

#[test]
fn a_study_per_head_count_runs_each_and_compares_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("heads.toml");
    std::fs::write(&config, HEADS_STUDY).unwrap();
    let run = dir.path().join("run");
    let args = [
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ];
    let stdout = ok(ropelab(&args));
    assert!(stdout.contains("== 4 heads per block =="), "{stdout}");
    for h in [1, 4] {
        for file in [
            "config.toml",
            "claims.json",
            "report.html",
            "seed-3/number/scores.jsonl",
        ] {
            let path = run.join(format!("heads-{h}")).join(file);
            assert!(path.exists(), "{} missing", path.display());
        }
        let sub = std::fs::read_to_string(run.join(format!("heads-{h}/config.toml"))).unwrap();
        assert!(sub.contains(&format!("n_heads = {h}\n")), "{sub}");
    }
    // Every (layer, head) of the 4-head model is scored.
    let scores = std::fs::read_to_string(run.join("heads-4/seed-3/letter/scores.jsonl")).unwrap();
    let last: Vec<&str> = scores
        .lines()
        .filter(|l| l.contains("\"step\":5,"))
        .collect();
    assert_eq!(last.len(), 2 * 4, "{scores}");
    // heads.csv: one row per (head count, seed, task), the types one letter per head.
    let csv = std::fs::read_to_string(run.join("heads.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 5, "{csv}");
    assert!(
        rows[0].starts_with("heads,seed,task,test_accuracy,types,"),
        "{csv}"
    );
    let types = |row: &str| row.split(',').nth(4).unwrap().to_string();
    assert_eq!(types(rows[1]).len(), 2, "{csv}");
    assert_eq!(types(rows[3]).len(), 2 * 4 + 1, "{csv}");
    assert!(types(rows[3]).contains('|'), "{csv}");
    let report = std::fs::read_to_string(run.join("report.html")).unwrap();
    for needle in [
        "Heads per layer: every model compared",
        "4 heads per layer: claims of the paper",
        "4 heads, seed 3, number: head types at step 5",
        "head types over training",
    ] {
        assert!(report.contains(needle), "report lacks {needle:?}");
    }
    // The 4-head study's own report draws frequency use per head.
    let sub = std::fs::read_to_string(run.join("heads-4/report.html")).unwrap();
    assert!(sub.contains("frequency use per head"));
    // The comparison is read as the study wrote it, each head count's folder must hold its
    // own study, and its config as it ran (twenty-third pass, MH1, MHsw2, MHc1).
    let r = run.to_str().unwrap();
    std::fs::write(run.join("heads.csv"), csv.replace(",number,", ",number,1")).unwrap();
    refused(&["report", r], "heads.csv");
    std::fs::write(run.join("heads.csv"), &csv).unwrap();
    std::fs::rename(run.join("heads-1"), run.join("swap")).unwrap();
    std::fs::rename(run.join("heads-4"), run.join("heads-1")).unwrap();
    std::fs::rename(run.join("swap"), run.join("heads-4")).unwrap();
    refused(&["report", r], "not of the 1 its folder names");
    std::fs::rename(run.join("heads-1"), run.join("swap")).unwrap();
    std::fs::rename(run.join("heads-4"), run.join("heads-1")).unwrap();
    std::fs::rename(run.join("swap"), run.join("heads-4")).unwrap();
    let sub_config = run.join("heads-1/config.toml");
    let kept = std::fs::read_to_string(&sub_config).unwrap();
    std::fs::write(&sub_config, kept.replacen("steps = ", "steps = 1", 1)).unwrap();
    refused(&["report", r], "config.toml");
    std::fs::write(&sub_config, kept).unwrap();
    ok(ropelab(&["report", r]));
    // collect names what each directory is: the root is a study per head count, a model's own
    // folder a run (twenty-third pass, UNCLEAR).
    refused(
        &["collect", r],
        "is a study per head count (heads-1, heads-4)",
    );
    let model = run.join("heads-4/seed-3/letter");
    refused(
        &["collect", model.to_str().unwrap()],
        "one job's directory of",
    );
    refused(
        &["collect", run.join("heads-4/seed-3").to_str().unwrap()],
        "a folder of the jobs of",
    );
    ok(ropelab(&["collect", run.join("heads-4").to_str().unwrap()]));
    // A rerun reuses everything; another config in the same directory is refused.
    ok(ropelab(&args));
    std::fs::write(&config, HEADS_STUDY.replace("[1, 4]", "[1, 2]")).unwrap();
    refused(&args, "holds a study with another config");
}

#[test]
fn bad_head_counts_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("heads.toml");
    for (counts, needle) in [
        ("[1, 3]", "must be a positive multiple of n_heads 3"),
        ("[2, 2]", "n_heads lists 2 twice"),
        ("[]", "n_heads must list at least one head count"),
        ("3", "must be a positive multiple of n_heads 3"),
        // Values of another kind name the key and what it takes (twenty-third pass).
        ("-1", "n_heads: expected a whole number of heads"),
        ("2.5", "n_heads: expected a whole number of heads"),
        ("\"two\"", "n_heads: expected a whole number of heads"),
        ("[2, \"x\"]", "or a list of them"),
    ] {
        std::fs::write(&config, HEADS_STUDY.replace("[1, 4]", counts)).unwrap();
        refused(&["reproduce", "--config", config.to_str().unwrap()], needle);
    }
}

#[test]
fn bad_vocabulary_sizes_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("vocab.toml");
    for (key, needle) in [
        ("letters = 30", "[tasks]: impossible layout: letters = 30"),
        ("letters = 4", "4 hops need 4 distinct chain letters"),
        (
            "offsets = 9",
            "offsets = 9: the query must reach the target window",
        ),
        ("numbers = 0", "numbers = 0"),
    ] {
        let text = HEADS_STUDY.replace(
            "hops = [1, 2, 3, 4]\n",
            &format!("hops = [1, 2, 3, 4]\n{key}\n"),
        );
        std::fs::write(&config, text).unwrap();
        refused(&["reproduce", "--config", config.to_str().unwrap()], needle);
    }
}
