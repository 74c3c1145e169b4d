//! `ropelab bias --quick` end to end: the grid trains and is measured, the content-moving
//! biases are carried over to the number and letter tasks, its tables and report are written,
//! the default model learns the ambiguous task on every seed, a rerun reuses every run, and bad
//! biases are one-line errors.

mod common;

use common::{ok, refused as one_line_error, ropelab};

#[test]
fn the_quick_grid_writes_its_tables_and_report_and_reruns_identically() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bias");
    let o = out.to_str().unwrap();
    let quick = ["bias", "--quick", "--transfer-steps", "40", "--out", o];
    let text = ok(ropelab(&quick));
    assert!(text.contains("6 runs (3 biases x 2 seeds)"), "{text}");
    for id in [
        "high_frequencies_toward_content",
        "symbolic_bias_raises_length",
        "discrepancy_predicts_length",
        "pure_heads_with_learning",
    ] {
        assert!(text.contains(id), "{id} not in {text}");
    }
    let mechanism = std::fs::read_to_string(out.join("mechanism.csv")).unwrap();
    let mut lines = mechanism.lines();
    assert_eq!(
        lines.next(),
        Some("bias,seed,positional,symbolic,neither,length_accuracy")
    );
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect();
    assert_eq!(rows.len(), 6);
    for r in &rows {
        let f: Vec<f64> = r[2..6].iter().map(|v| v.parse().unwrap()).collect();
        assert!((f[0] + f[1] + f[2] - 1.0).abs() < 1e-9, "{r:?}");
        assert!(f.iter().all(|v| (0.0..=1.0).contains(v)));
    }
    // The default model learns the task on every seed (>= 0.99 at the training length).
    let accuracy = std::fs::read_to_string(out.join("accuracy.csv")).unwrap();
    assert_eq!(accuracy.lines().next(), Some("bias,seed,items,n,accuracy"));
    let trained: Vec<f64> = accuracy
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("none,") && l.split(',').nth(2) == Some("16"))
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(trained.len(), 2);
    assert!(trained.iter().all(|&a| a >= 0.99), "{trained:?}");
    let heads = std::fs::read_to_string(out.join("heads.csv")).unwrap();
    assert_eq!(heads.lines().count(), 1 + 6 * 2);
    let claims = std::fs::read_to_string(out.join("claims.csv")).unwrap();
    assert_eq!(claims.lines().count(), 1 + 4);
    // The transfer stage: `none` and every bias that moved the symbolic fraction by 0.1, on
    // both tasks and both seeds, each with its length curve.
    let symbolic = |bias: &str| {
        let v: Vec<f64> = rows
            .iter()
            .filter(|r| r[0] == bias)
            .map(|r| r[3].parse::<f64>().unwrap())
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let movers: Vec<&str> = ["keep-high:16", "nope:0"]
        .into_iter()
        .filter(|b| symbolic(b) - symbolic("none") >= 0.1)
        .collect();
    let transfer = std::fs::read_to_string(out.join("transfer.csv")).unwrap();
    assert_eq!(
        transfer.lines().next(),
        Some("task,bias,seed,test_accuracy,types,first_below,margin,train_seconds")
    );
    let carried: Vec<&str> = transfer
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(1).unwrap())
        .collect();
    assert_eq!(carried.len(), 2 * 2 * (1 + movers.len()), "{transfer}");
    for b in std::iter::once("none").chain(movers.iter().copied()) {
        assert_eq!(
            carried.iter().filter(|c| **c == b).count(),
            4,
            "{b}: {transfer}"
        );
    }
    let lengths = std::fs::read_to_string(out.join("transfer_lengths.csv")).unwrap();
    assert_eq!(lengths.lines().count(), 1 + carried.len() * 3, "{lengths}");
    assert!(text.contains("Transfer ("), "{text}");
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    for needle in [
        "Claims",
        "keep-high:16",
        "<svg",
        "positional",
        "Transfer: the content-moving biases",
        "number task: accuracy versus input length",
    ] {
        assert!(report.contains(needle), "{needle} not in the report");
    }
    // Nothing is loaded from anywhere (SVG namespaces aside).
    for link in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(!report.contains(link), "{link} in the report");
    }
    // A rerun trains nothing and writes the same numbers.
    ok(ropelab(&quick));
    assert_eq!(
        std::fs::read_to_string(out.join("mechanism.csv")).unwrap(),
        mechanism
    );
    assert_eq!(
        std::fs::read_to_string(out.join("transfer.csv"))
            .unwrap()
            .lines()
            .map(|l| l.rsplit_once(',').unwrap().0.to_string())
            .collect::<Vec<_>>(),
        transfer
            .lines()
            .map(|l| l.rsplit_once(',').unwrap().0.to_string())
            .collect::<Vec<_>>()
    );
}

#[test]
fn bad_biases_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("b");
    for (bias, want) in [
        ("alibi", "unknown bias"),
        ("keep-high:40", "32 planes"),
        ("nope:3", "2 layers"),
        ("base:1", "above 1"),
    ] {
        one_line_error(
            &["bias", "--biases", bias, "--out", o.to_str().unwrap()],
            want,
        );
    }
    // A study that is not there, or one nothing would read, is refused before any training.
    let missing = dir.path().join("no-such-study");
    let (o, m) = (o.to_str().unwrap(), missing.to_str().unwrap());
    one_line_error(
        &["bias", "--quick", "--study", m, "--out", o],
        "is not a study directory",
    );
    one_line_error(
        &["bias", "--quick", "--no-transfer", "--study", m, "--out", o],
        "drop --no-transfer or the --study",
    );
    assert!(!dir.path().join("b").exists(), "a refused run wrote {o}");
}

#[test]
fn shards_cover_the_grid_and_collect_to_the_same_tables() {
    let dir = tempfile::tempdir().unwrap();
    let grid = ["bias", "--quick", "--steps", "20", "--seeds", "0"];
    let whole = dir.path().join("whole");
    let mut args = grid.to_vec();
    args.extend(["--out", whole.to_str().unwrap()]);
    ok(ropelab(&args));
    let parts = dir.path().join("parts");
    let p = parts.to_str().unwrap();
    for shard in ["0/2", "1/2"] {
        let mut args = grid.to_vec();
        args.extend(["--out", p, "--shard", shard]);
        let text = ok(ropelab(&args));
        assert!(text.contains(&format!("shard {shard}")), "{text}");
        assert!(!parts.join("mechanism.csv").exists());
    }
    let mut args = grid.to_vec();
    args.extend(["--out", p]);
    ok(ropelab(&args));
    assert_eq!(
        std::fs::read_to_string(parts.join("mechanism.csv")).unwrap(),
        std::fs::read_to_string(whole.join("mechanism.csv")).unwrap()
    );
    // --slurm writes the array that runs those shards.
    let mut args = grid.to_vec();
    args.extend(["--out", p, "--slurm", "--shards", "2"]);
    ok(ropelab(&args));
    let script = std::fs::read_to_string(parts.join("bias.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --array=0-1\n"), "{script}");
    assert!(
        script.contains("'bias' '--quick' '--seeds' '0' '--steps' '20'"),
        "{script}"
    );
    assert!(script.contains("--shard \"$SLURM_ARRAY_TASK_ID/2\""));
    // Another experiment does not take over the directory its array is planned for
    // (twenty-first pass, N6).
    common::refused(
        &["languages", "--steps", "1", "--out", p],
        "holds bias.sbatch, a Slurm array `ropelab bias` planned there",
    );
    // Nor does a study (twenty-second pass, S2).
    let study = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../python/tests/small_study.toml"
    );
    common::refused(
        &[
            "reproduce",
            "--config",
            study,
            "--no-pretrained",
            "--out",
            p,
        ],
        "holds bias.sbatch, a Slurm array `ropelab bias` planned there",
    );
}
