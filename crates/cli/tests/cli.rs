//! The `ropelab` binary end to end: outputs, determinism, and one-line errors on bad input.

use std::path::Path;
use std::process::{Command, Output};

fn ropelab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ropelab"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts a failure with exactly one line on stderr that mentions `needle`.
fn assert_one_line_error(out: &Output, needle: &str) {
    let err = stderr(out);
    assert!(!out.status.success(), "expected failure, stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains(needle), "{needle:?} not in {err:?}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn gen_writes_the_documented_fields_and_is_byte_identical_per_seed() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    for (name, seed) in [("a.jsonl", "5"), ("b.jsonl", "5"), ("c.jsonl", "6")] {
        let out = ropelab(&[
            "gen",
            "letter",
            "--n",
            "300",
            "--seed",
            seed,
            "--out",
            &path(name),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let read = |name: &str| std::fs::read(path(name)).unwrap();
    assert_eq!(read("a.jsonl"), read("b.jsonl"));
    assert_ne!(read("a.jsonl"), read("c.jsonl"));

    let text = String::from_utf8(read("a.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 300);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let tokens = v["tokens"].as_array().unwrap();
        let ids = v["ids"].as_array().unwrap();
        assert_eq!((tokens.len(), ids.len()), (17, 17));
        let pos = v["target_pos"].as_u64().unwrap() as usize;
        assert_eq!(tokens[pos], v["answer"]);
        assert_eq!(ids[pos], v["answer_id"]);
        assert!((1..=4).contains(&v["hops"].as_u64().unwrap()));
    }
}

#[test]
fn gen_to_stdout_with_extension_and_prompts() {
    let out = ropelab(&[
        "gen", "number", "--n", "3", "--extra", "5", "--split", "test", "--out", "-",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["tokens"].as_array().unwrap().len(), 22);
        assert!(v["target_pos"].as_u64().unwrap() >= 5);
    }

    let out = ropelab(&[
        "gen",
        "letter",
        "--prompt",
        "--target-window",
        "32",
        "--n",
        "4",
        "--out",
        "-",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 4);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let prompt = v["prompt"].as_str().unwrap();
        let answer = v["answer"].as_str().unwrap();
        assert!(prompt.ends_with(" ->"));
        let question = prompt.lines().last().unwrap();
        assert!(question.split(' ').any(|t| t == answer));
    }
}

#[test]
fn bad_input_gives_one_line_errors_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out.jsonl");
    let t = target.to_str().unwrap();

    assert_one_line_error(
        &ropelab(&["gen", "words", "--n", "5", "--out", t]),
        "unknown task",
    );
    assert_one_line_error(&ropelab(&["gen", "number", "--n", "0", "--out", t]), "--n");
    assert_one_line_error(
        &ropelab(&["gen", "number", "--n", "5", "--hops", "1,12", "--out", t]),
        "12 hops need 11 pre-target positions",
    );
    assert_one_line_error(
        &ropelab(&[
            "gen",
            "letter",
            "--n",
            "5",
            "--hops",
            "8",
            "--pre-window",
            "9",
            "--out",
            t,
        ]),
        "at most 7 hops",
    );
    assert_one_line_error(
        &ropelab(&[
            "gen",
            "number",
            "--prompt",
            "--target-window",
            "0",
            "--n",
            "5",
            "--out",
            t,
        ]),
        "window size",
    );
    assert_one_line_error(&ropelab(&["gen", "number", "--n", "5"]), "--out");
    assert!(!target.exists(), "a failed run left {t}");

    // An output path below a regular file cannot be created.
    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let below = file.join("out.jsonl");
    assert_one_line_error(
        &ropelab(&[
            "gen",
            "number",
            "--n",
            "5",
            "--out",
            below.to_str().unwrap(),
        ]),
        "cannot write",
    );
    assert_one_line_error(
        &ropelab(&[
            "gen",
            "number",
            "--n",
            "5",
            "--out",
            dir.path().to_str().unwrap(),
        ]),
        "is a directory",
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(
        leftovers.len(),
        1,
        "only the plain file remains: {leftovers:?}"
    );
}

#[test]
fn a_failed_write_keeps_the_previous_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("keep.jsonl");
    std::fs::write(&target, "previous\n").unwrap();
    let out = ropelab(&[
        "gen",
        "number",
        "--n",
        "5",
        "--hops",
        "10",
        "--out",
        target.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "previous\n");
}

/// A study small enough for a test: one seed, a tiny model (4 layers: one per hop, which the
/// [compose] comparison needs), 5 steps.
const SMALL_STUDY: &str =
    "name = \"small\"\nseeds = [3]\n[tasks]\ntrain = 500\nval = 20\ntest = 40\n\
     target_window = 8\npre_window = 8\nhops = [1, 2, 3, 4]\n\
     [train]\npreset = \"tiny\"\nsteps = 5\nn_layers = 4\n\
     [score]\nsamples = 10\n\
     [lengthgen]\nextras = [0, 20]\nsamples = 8\n\
     [ablation]\nsamples = 16\n\
     [theory]\nmax_n = 50\nd = 8\nbases = [100.0]\nlengths = [64]\ndraws = 2\nrho = 0.5\n\
     [offset]\npe = [\"rope\", \"ape\"]\nattention = [\"softmax\"]\nk = [1]\nseeds = [0]\n\
     steps = 5\ntrain_len = 4\ntest_lens = [4, 8, 16]\nper_length = 8\n\
     [canonical]\ntasks = [\"partial\"]\nbands = [\"all\"]\nseeds = [0]\nsteps = 5\n\
     [compose]\nlayers = 1\nseeds = [3]\n";

#[test]
fn reproduce_runs_a_small_config_and_reports_bad_configs() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("small.toml");
    std::fs::write(&config, SMALL_STUDY).unwrap();
    let run = dir.path().join("run");
    let out = ropelab(&[
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("letter  test"), "{stdout}");
    for file in [
        "config.toml",
        "tasks.json",
        "training.json",
        "seed-3/data/number-test.jsonl",
        "seed-3/number/checkpoints/step-000005/model.safetensors",
        "seed-3/letter/metrics.jsonl",
        "seed-3/number/scores.jsonl",
        "seed-3/number/eval/step-000005-extra-0.json",
        "seed-3/letter/lengthgen.csv",
        "seed-3/number/hops.csv",
        "seed-3/number/ablation.csv",
        "seed-3/letter/ablation.csv",
        "claims.json",
        "report.html",
        "theory/discrepancy-index.csv",
        "theory/discrepancy-retrieval.csv",
        "theory/rope-failures.csv",
        "offset/accuracy.csv",
        "offset/runs.csv",
        "offset/mechanism.csv",
        "offset/runs/ape-softmax/k-1/seed-0/pinning.csv",
    ] {
        assert!(Path::new(&run.join(file)).exists(), "{file} missing");
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("tasks.json")).unwrap()).unwrap();
    assert_eq!(summary.as_array().unwrap().len(), 6);
    assert!(summary
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["valid"] == r["samples"]));
    let training: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("training.json")).unwrap()).unwrap();
    assert_eq!(training[0]["steps"], 5);
    assert_eq!(training[1]["test"]["n"], 40);
    assert!(stdout.contains("pure from"), "{stdout}");
    assert!(stdout.contains("claims of the paper"), "{stdout}");
    let claims: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("claims.json")).unwrap()).unwrap();
    assert_eq!(claims.as_array().unwrap().len(), 26);
    // The [offset] table's claims are measured (the third has no linear run to measure).
    let ids: Vec<&str> = claims
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids[19..22],
        [
            "offset_rotary_extrapolates",
            "offset_dilution_law",
            "offset_linear_fails"
        ]
    );
    assert_eq!(claims[19]["n"], 1);
    assert_eq!(claims[21]["verdict"], "undetermined");
    assert!(claims[21]["reason"]
        .as_str()
        .unwrap()
        .contains("not measured"));
    // The number model's hop map is measured, but a model that learned nothing cannot answer
    // the question: undetermined, saying why.
    assert_eq!(claims[6]["id"], "number_hops_composed");
    assert_eq!(claims[6]["n"], 1);
    assert_eq!(claims[6]["verdict"], "undetermined");
    assert!(claims[6]["reason"]
        .as_str()
        .unwrap()
        .contains("the number model did not learn its task"));
    // The theory rows are exact checks, counted apart.
    for i in [17, 18] {
        assert_eq!(claims[i]["category"], "exact_check", "{}", claims[i]);
    }
    assert_eq!(claims[0]["category"], "empirical");
    assert!(!Path::new(&run.join("seed-3/letter/hops.csv")).exists());
    assert!(
        stdout.contains("implicit bias: fixed-offset retrieval"),
        "{stdout}"
    );
    let report = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(report.contains("Fixed-offset retrieval: rotary, learned absolute, none"));
    // The [canonical] table: Partial Induction with all planes, its two-angle table and claim.
    assert!(run.join("canonical/partial/hand_head.json").exists());
    assert!(
        stdout.contains("canonical task partial (canonical/partial/)"),
        "{stdout}"
    );
    assert!(
        report.contains("Canonical task partial"),
        "report lacks the canonical section"
    );
    assert_eq!(claims[25]["id"], "partial_two_angles");
    assert_eq!(claims[25]["n"], 1);
    assert_eq!(claims[22]["verdict"], "undetermined");
    // The [compose] table: a 1-layer number model of seed 3, measured as the study's models,
    // and the composing claim measured on it (undetermined: nothing was learned in 5 steps).
    for file in [
        "scores.jsonl",
        "lengthgen.csv",
        "layer_sets.csv",
        "probes.csv",
        "hops.csv",
    ] {
        assert!(
            run.join("seed-3/compose").join(file).exists(),
            "compose {file} missing"
        );
    }
    assert_eq!(claims[16]["id"], "composing_generalises_worse");
    assert_eq!(claims[16]["verdict"], "undetermined");
    assert_eq!(
        claims[16]["n"], 3,
        "hops 2, 3 and 4 exceed 1 layer: {}",
        claims[16]
    );
    assert!(claims[16]["reason"]
        .as_str()
        .unwrap()
        .contains("fewer than 2 seeds"));
    assert_eq!(claims[4]["id"], "pure_heads_with_learning");
    // 5 steps of a tiny model learn nothing: "learned" does not hold, the claims that need a
    // learned model are undetermined, and none is marked as holding without its numbers.
    for c in claims.as_array().unwrap() {
        assert!(!c["measured"].as_array().unwrap().is_empty(), "{c}");
    }
    let learned = &claims[0];
    assert_eq!(learned["id"], "both_tasks_learned");
    assert_eq!(learned["verdict"], "does_not_hold");
    let lengths = std::fs::read_to_string(run.join("seed-3/letter/lengthgen.csv")).unwrap();
    assert_eq!(lengths.lines().count(), 3, "{lengths}");
    let csv = std::fs::read_to_string(run.join("theory/discrepancy-index.csv")).unwrap();
    assert!(csv.starts_with("n,delta,bound,delta_max,mechanism\n"));
    assert_eq!(csv.lines().count(), 51);

    // The study's models are sweep jobs: `collect` merges them like a sweep's, with the test
    // accuracy reproduce reported, and the study's report keeps its sections.
    let said = ropelab(&["collect", run.to_str().unwrap()]);
    assert!(said.status.success(), "{}", stderr(&said));
    let jobs = std::fs::read_to_string(run.join("collected/jobs.csv")).unwrap();
    // Two models and the [compose] one (a `layers` parameter).
    assert_eq!(jobs.lines().count(), 4, "{jobs}");
    let header: Vec<&str> = jobs.lines().next().unwrap().split(',').collect();
    assert_eq!(header.iter().filter(|h| **h == "task").count(), 1, "{jobs}");
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let composing: Vec<&str> = jobs
        .lines()
        .skip(1)
        .filter(|l| !l.split(',').nth(column("layers")).unwrap().is_empty())
        .collect();
    assert_eq!(composing.len(), 1, "{jobs}");
    assert!(composing[0].contains(",1,3,number,"), "{jobs}");
    for (line, trained) in jobs
        .lines()
        .skip(1)
        .filter(|l| l.split(',').nth(column("layers")).unwrap().is_empty())
        .zip(training.as_array().unwrap().iter().rev())
    {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells[column("seed")], "3");
        assert_eq!(
            cells[column("task")],
            trained["task"].as_str().unwrap(),
            "{jobs}"
        );
        let accuracy: f64 = cells[column("test_accuracy")].parse().unwrap();
        assert_eq!(accuracy, trained["test"]["accuracy"].as_f64().unwrap());
    }
    let collected = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(collected.contains("Sweep: every configuration over its seeds"));
    assert!(collected.contains("Fixed-offset retrieval: rotary, learned absolute, none"));

    // `ropelab hops` does not replace the study's hop map with another one; it records its own
    // map of a measured run in the ledger under the study's key, so the study reuses it.
    let number = run.join("seed-3/number");
    let other = ropelab(&["hops", "--run", number.to_str().unwrap(), "--n", "8"]);
    assert!(!other.status.success());
    assert!(stderr(&other).contains("hops.csv"), "{}", stderr(&other));
    std::fs::remove_file(number.join("hops.csv")).unwrap();
    let own = ropelab(&["hops", "--run", number.to_str().unwrap()]);
    assert!(own.status.success(), "{}", stderr(&own));
    let ledger = std::fs::read_to_string(number.join("measured.json")).unwrap();
    assert!(
        ledger.contains("hop map of step 5: samples 256"),
        "{ledger}"
    );
    // `ropelab ablate` with another gamma does not replace the study's ablations either.
    let other = ropelab(&[
        "ablate",
        "--run",
        number.to_str().unwrap(),
        "--n",
        "16",
        "--gamma",
        "0.2",
    ]);
    assert!(!other.status.success());
    assert!(
        stderr(&other).contains("ablation.csv"),
        "{}",
        stderr(&other)
    );

    // A second reproduce reuses the finished runs.
    let again = ropelab(&[
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ]);
    assert!(again.status.success(), "{}", stderr(&again));

    // A rerun with another config is refused before anything is written.
    let before: Vec<Vec<u8>> = ["config.toml", "tasks.json", "seed-3/data/number-test.jsonl"]
        .iter()
        .map(|f| std::fs::read(run.join(f)).unwrap())
        .collect();
    let changed = dir.path().join("changed.toml");
    std::fs::write(&changed, SMALL_STUDY.replace("steps = 5", "steps = 6")).unwrap();
    let refused = ropelab(&[
        "reproduce",
        "--config",
        changed.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    // It names the first setting that changed (here every `steps = 5` became 6; the first in
    // key order is the [canonical] table's).
    assert!(
        stderr(&refused).contains(
            "holds a study with another config: canonical.steps was 5, the config now gives 6"
        ),
        "{}",
        stderr(&refused)
    );
    for (f, bytes) in ["config.toml", "tasks.json", "seed-3/data/number-test.jsonl"]
        .iter()
        .zip(&before)
    {
        assert_eq!(
            &std::fs::read(run.join(f)).unwrap(),
            bytes,
            "{f} was rewritten"
        );
    }

    // Models trained side by side give the same files as one at a time.
    let parallel = dir.path().join("parallel");
    let out = ropelab(&[
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--seeds",
        "3",
        "--jobs",
        "1",
        "--out",
        parallel.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    for file in [
        "seed-3/number/metrics.jsonl",
        "seed-3/letter/scores.jsonl",
        "seed-3/letter/lengthgen.csv",
        "claims.json",
    ] {
        assert_eq!(
            std::fs::read(run.join(file)).unwrap(),
            std::fs::read(parallel.join(file)).unwrap(),
            "{file}"
        );
    }

    std::fs::write(&config, "name = \"small\"\nseeds = -1\n").unwrap();
    let out = ropelab(&[
        "reproduce",
        "--config",
        config.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, "small.toml");
    let missing = dir.path().join("missing.toml");
    let out = ropelab(&["reproduce", "--config", missing.to_str().unwrap()]);
    assert_one_line_error(&out, "missing.toml");
}

#[test]
fn help_explains_every_subcommand() {
    let out = ropelab(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for cmd in ["reproduce", "gen", "bench"] {
        assert!(help.contains(cmd), "{cmd} missing from --help");
        assert!(ropelab(&[cmd, "--help"]).status.success());
    }
}

#[test]
fn theory_commands_write_csv_and_reject_bad_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("d.csv");
    let c = csv.to_str().unwrap();
    let out = ropelab(&[
        "theory",
        "discrepancy",
        "--mechanism",
        "index",
        "--theta",
        "0.866",
        "--max-n",
        "1000",
        "--out",
        c,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 1001);
    for line in text.lines().skip(1) {
        let v: Vec<f64> = line
            .split(',')
            .take(4)
            .map(|x| x.parse().unwrap())
            .collect();
        assert!(v[1] <= v[2] + 1e-12, "delta above the bound: {line}");
        assert!(line.ends_with(",index"), "{line}");
    }
    let stats = dir.path().join("s.csv");
    let out = ropelab(&[
        "theory",
        "rope-stats",
        "--d",
        "16",
        "--bases",
        "100,10000",
        "--lengths",
        "64,512",
        "--draws",
        "3",
        "--out",
        stats.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&stats).unwrap().lines().count(), 5);
    // A head that fails at its first query certifies no range: said so, not shown as the
    // length k - 1 (twenty-second pass, N4).
    let range = dir.path().join("r.csv");
    let out = ropelab(&[
        "theory",
        "offset-range",
        "--g",
        "3.14159265",
        "--k",
        "4",
        "--cap",
        "100",
        "--scales",
        "1",
        "--out",
        range.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("none (fails at i = k = 4)"),
        "{text}"
    );
    let table = std::fs::read_to_string(&range).unwrap();
    assert!(
        table
            .lines()
            .next()
            .unwrap()
            .ends_with(",certified_range,certifies")
            && table.lines().nth(1).unwrap().ends_with(",false"),
        "{table}"
    );

    let bad = |args: &[&str], needle: &str| {
        let mut all = vec!["theory"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--out", c]);
        assert_one_line_error(&ropelab(&all), needle);
    };
    bad(
        &["discrepancy", "--mechanism", "index", "--theta", "0"],
        "theta must lie in (0, 2 pi)",
    );
    // A full turn is theta = 0 again: every margin 0 (sixth pass, S4).
    bad(
        &[
            "discrepancy",
            "--mechanism",
            "index",
            "--theta",
            "6.283185307179586",
        ],
        "theta must lie in (0, 2 pi) (angles repeat every turn: 2 pi is 0)",
    );
    // A negative value reaches the range check, not clap's "unexpected argument '-0'"
    // (eighteenth pass, TH14).
    bad(
        &["discrepancy", "--mechanism", "index", "--theta", "-0.5"],
        "theta must lie in (0, 2 pi)",
    );
    bad(
        &["offset-range", "--g", "-1", "--cap", "100"],
        "g must lie in (0, 2 pi]",
    );
    // A negative number to a flag that takes a count is named as that flag's value, not as
    // an unknown argument '-4' (twentieth pass, F-U1).
    bad(
        &["rope-stats", "--d", "-4"],
        "--d -4: a negative number is not a value --d takes",
    );
    bad(
        &[
            "discrepancy",
            "--mechanism",
            "index",
            "--theta",
            "1",
            "--max-n",
            "-inf",
        ],
        "--max-n -inf: a negative number",
    );
    // Every spelling of a negative number (nineteenth pass, U2).
    for theta in ["-1e-9", "-.5", "-inf"] {
        bad(
            &["discrepancy", "--mechanism", "index", "--theta", theta],
            "theta must lie in (0, 2 pi)",
        );
    }
    // Angles past a turn, and scales or rotations the numbers cannot hold (fifth pass).
    bad(
        &["discrepancy", "--mechanism", "index", "--theta", "1e300"],
        "theta must lie in (0, 2 pi)",
    );
    bad(
        &["offset-range", "--g", "1e300", "--cap", "100"],
        "g must lie in (0, 2 pi]",
    );
    bad(
        &[
            "offset-range",
            "--g",
            "1",
            "--k",
            "4",
            "--scales",
            "1000",
            "--cap",
            "1000",
            "--format",
            "f16",
        ],
        "overflows f16",
    );
    bad(
        &["discrepancy", "--mechanism", "index", "--theta=-1"],
        "theta",
    );
    bad(
        &[
            "discrepancy",
            "--mechanism",
            "retrieval",
            "--theta",
            "0.1",
            "--max-n",
            "0",
        ],
        "n0",
    );
    bad(
        &[
            "discrepancy",
            "--mechanism",
            "retrieval",
            "--theta",
            "0.1",
            "--max-n",
            "10000000000",
        ],
        "between 1 and 20000",
    );
    bad(
        &[
            "discrepancy",
            "--mechanism",
            "retrieval",
            "--theta",
            "0.1",
            "--alphabet",
            "100000000000",
        ],
        "alphabet",
    );
    bad(&["rope-stats", "--bases", "0"], "base must lie in");
    bad(&["rope-stats", "--lengths", "1"], "between 2 and");
    // Sizes that would take tens of gigabytes are refused up front, not attempted.
    bad(&["rope-stats", "--lengths", "10000000000"], "between 2 and");
    bad(&["rope-stats", "--d", "1048576"], "at most");
    bad(&["rope-stats", "--format", "fp8"], "unknown number format");
    bad(&["periodic", "--m", "1"], "at least 2");
    bad(&["offset-range", "--g", "0"], "g must lie in (0, 2 pi]");
    // One letter: an Index head that reads the wrong letter position is still right (sixth
    // pass, S5).
    assert_one_line_error(
        &ropelab(&[
            "theory",
            "construct",
            "--mechanism",
            "index",
            "--theta",
            "0.866",
            "--letters",
            "1",
            "--n0",
            "3",
            "--long",
            "8",
            "--samples",
            "2",
        ]),
        "the Index head needs at least 2 letters, got 1",
    );
    // `--out -`: standard output holds the table alone, the summary goes to standard error
    // (seventh pass, TP6).
    let piped = ropelab(&[
        "theory",
        "discrepancy",
        "--mechanism",
        "index",
        "--theta",
        "0.5",
        "--max-n",
        "3",
        "--out",
        "-",
    ]);
    assert!(piped.status.success(), "{}", stderr(&piped));
    let table = String::from_utf8_lossy(&piped.stdout);
    assert!(
        table.starts_with("n,delta,bound,delta_max,mechanism\n") && table.lines().count() == 4,
        "{table}"
    );
    assert!(stderr(&piped).contains("wrote -"), "{}", stderr(&piped));
    // A base whose frequencies overflow is no benchmark of RoPE (sixth pass, S6).
    assert_one_line_error(
        &ropelab(&["bench", "rope", "--base", "1e-300"]),
        "base must lie in [1e-12, 1e12], got 1e-300",
    );
    // Another table over the discrepancy table is refused (tenth pass, L2); a file of its own
    // is written.
    assert_one_line_error(
        &ropelab(&[
            "theory", "periodic", "--m", "3", "--len", "1000", "--out", c,
        ]),
        "is an existing file, another kind of file than",
    );
    let periodic = dir.path().join("periodic.csv");
    let out = ropelab(&[
        "theory",
        "periodic",
        "--m",
        "3",
        "--len",
        "1000",
        "--out",
        periodic.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&periodic).unwrap();
    assert_eq!(text.lines().count(), 1 + 3 * 2, "{text}");
    assert!(
        text.lines().skip(1).all(|l| l.ends_with(',')),
        "a MOD head was not exact: {text}"
    );
}

/// A copy of fixture model `from` in `dir` with a context of 4,096 tokens (config.json's
/// `max_position_embeddings` or `n_positions`, a GGUF file's `llama.context_length`): RoPE
/// learns no positions, so nothing else changes.
fn long_context(from: &Path, dir: &Path) -> std::path::PathBuf {
    let to = dir.join(from.file_name().unwrap());
    if from.is_dir() {
        std::fs::create_dir(&to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap();
            if name == "config.json" {
                let text = std::fs::read_to_string(&path).unwrap();
                let long = text
                    .replace(
                        "\"max_position_embeddings\": 128",
                        "\"max_position_embeddings\": 4096",
                    )
                    .replace("\"n_positions\": 128", "\"n_positions\": 4096");
                assert_ne!(long, text, "{}: no context key", path.display());
                std::fs::write(to.join(name), long).unwrap();
            } else {
                std::fs::copy(&path, to.join(name)).unwrap();
            }
        }
    } else {
        let mut bytes = std::fs::read(from).unwrap();
        let key = b"llama.context_length";
        // The key, its u32 type code, then the u32 value.
        let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4;
        assert_eq!(
            u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()),
            128
        );
        bytes[at..at + 4].copy_from_slice(&4096u32.to_le_bytes());
        std::fs::write(&to, bytes).unwrap();
    }
    to
}

/// `--model` on every `pretrained` command: the tiny fixture models of each architecture
/// (fixtures/rope_models) score, generate and give RoPE statistics; bad paths and unsupported
/// files are refused in one line naming the file.
#[test]
fn pretrained_commands_take_any_local_rope_model() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rope_models");
    let dir = tempfile::tempdir().unwrap();
    // The prompt versions are longer than the fixtures' 128-token context: refused there.
    let short = dir.path().join("short.jsonl");
    let out = ropelab(&[
        "pretrained",
        "score",
        "--model",
        fixtures.join("qwen2").to_str().unwrap(),
        "--task",
        "letter",
        "--n",
        "2",
        "--out",
        short.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, "beyond the model's context of 128 tokens");
    assert!(!short.exists());
    for name in ["llama.gguf", "qwen2", "gptneox", "gptj"] {
        let model = long_context(&fixtures.join(name), dir.path());
        let model = model.to_str().unwrap();
        let out_path = dir.path().join(format!("{name}.jsonl"));
        let out = ropelab(&[
            "pretrained",
            "score",
            "--model",
            model,
            "--task",
            "letter",
            "--n",
            "2",
            "--out",
            out_path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let text = std::fs::read_to_string(&out_path).unwrap();
        assert_eq!(text.lines().count(), 8, "{name}: 2 layers x 4 heads");
        for line in text.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let (p, s) = (v["s_pos"].as_f64().unwrap(), v["s_sym"].as_f64().unwrap());
            assert!((0.0..=1.0).contains(&p) && (0.0..=1.0).contains(&s), "{v}");
            // Each line records the prompts it was scored on (thirteenth pass, S6).
            assert_eq!(
                (&v["task"], &v["size"], &v["prompts"], &v["tau"]),
                (
                    &serde_json::json!("letter"),
                    &serde_json::json!(16),
                    &serde_json::json!(2),
                    &serde_json::json!(0.0001)
                ),
                "{v}"
            );
        }
        let out = ropelab(&[
            "pretrained",
            "generate",
            "--model",
            model,
            "--max-new",
            "3",
            "a b",
        ]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let csv = dir.path().join(format!("{name}.csv"));
        let out = ropelab(&[
            "pretrained",
            "rope-stats",
            "--model",
            model,
            "--lengths",
            "16",
            "--draws",
            "50",
            "--out",
            csv.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        // The default layers: the first, middle and last of this 2-layer model.
        let layers: std::collections::BTreeSet<String> = std::fs::read_to_string(&csv)
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap().to_owned())
            .collect();
        assert_eq!(layers.into_iter().collect::<Vec<_>>(), ["0", "1"], "{name}");
        // A row is the same whichever other lengths were asked, in whatever order
        // (twenty-fourth pass, B-S4).
        let rows_of = |lengths: &str| {
            // Apart from the folder the report reads below.
            let rows_dir = dir.path().join("rows");
            std::fs::create_dir_all(&rows_dir).unwrap();
            let path = rows_dir.join(format!("{name}-{}.csv", lengths.replace(',', "-")));
            let out = ropelab(&[
                "pretrained",
                "rope-stats",
                "--model",
                model,
                "--lengths",
                lengths,
                "--draws",
                "50",
                "--out",
                path.to_str().unwrap(),
            ]);
            assert!(out.status.success(), "{name}: {}", stderr(&out));
            // The rates (layer, length and the four event rates): the draws are the same; the
            // moments' last digits follow the forward pass's length.
            let mut rows: Vec<String> = std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .skip(1)
                .filter(|l| l.split(',').nth(1) == Some("16"))
                .map(|l| l.split(',').take(6).collect::<Vec<_>>().join(","))
                .collect();
            rows.sort();
            rows
        };
        let alone = rows_of("16");
        assert_eq!(alone.len(), 2, "{alone:?}");
        assert_eq!(rows_of("32,16"), alone, "{name}");
        // The hooked analyses are f32 only: bf16 would change nothing (twenty-fourth pass,
        // B-S8).
        let bf16 = dir.path().join("rows").join(format!("{name}-bf16"));
        let b = bf16.to_str().unwrap();
        for args in [
            vec![
                "score", "--task", "number", "--size", "12", "--n", "2", "--out", b,
            ],
            vec!["rope-stats", "--out", b],
        ] {
            let mut all = vec![
                "pretrained",
                args[0],
                "--model",
                model,
                "--precision",
                "bf16",
            ];
            all.extend(&args[1..]);
            assert_one_line_error(&ropelab(&all), "computes in f32 only");
            assert!(!bf16.exists());
        }
        // The index task's rows record their prompt count and precision (thirteenth pass, S7).
        let index = dir.path().join(format!("{name}-index.csv"));
        let out = ropelab(&[
            "pretrained",
            "index-task",
            "--model",
            model,
            "--lengths",
            "80",
            "--n",
            "2",
            "--precision",
            "bf16",
            "--out",
            index.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        let text = std::fs::read_to_string(&index).unwrap();
        let mut rows = csv::Reader::from_reader(text.as_bytes());
        let header = rows.headers().unwrap().clone();
        let row = rows.records().next().unwrap().unwrap();
        let cell = |key: &str| row[header.iter().position(|h| h == key).unwrap()].to_owned();
        assert_eq!(
            (cell("n"), cell("precision")),
            ("2".into(), "bf16".into()),
            "{text}"
        );
        // A folder of index-task output alone is named as such, not as another program's.
        let alone = dir.path().join(format!("{name}-index-alone"));
        std::fs::create_dir(&alone).unwrap();
        std::fs::copy(&index, alone.join("idx.csv")).unwrap();
        let out = ropelab(&["report", alone.to_str().unwrap()]);
        let err = stderr(&out);
        assert!(
            !out.status.success() && err.contains("idx.csv is `ropelab pretrained index-task`"),
            "{err}"
        );
    }
    // Another table (or a page) in the way is refused, not replaced, in a folder of pretrained
    // output too; a run's directory takes no pretrained output (tenth pass, L1-L3, S1).
    let model = dir.path().join("gptj");
    let rope_stats = |out: &Path| {
        ropelab(&[
            "pretrained",
            "rope-stats",
            "--model",
            model.to_str().unwrap(),
            "--lengths",
            "16",
            "--draws",
            "5",
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let scores = std::fs::read(dir.path().join("gptj.jsonl")).unwrap();
    // (Refused by its extension first: a rope-stats table is a .csv; twenty-second pass, U1.)
    assert_one_line_error(
        &rope_stats(&dir.path().join("gptj.jsonl")),
        "writes a .csv file",
    );
    assert_eq!(
        std::fs::read(dir.path().join("gptj.jsonl")).unwrap(),
        scores
    );
    let folder = dir.path().join("folder");
    std::fs::create_dir(&folder).unwrap();
    std::fs::copy(dir.path().join("gptj.csv"), folder.join("gptj.csv")).unwrap();
    assert!(ropelab(&["report", folder.to_str().unwrap()])
        .status
        .success());
    let table = std::fs::read(folder.join("gptj.csv")).unwrap();
    let page = std::fs::read(folder.join("report.html")).unwrap();
    assert_one_line_error(
        &rope_stats(&folder.join("report.html")),
        "writes a .csv file",
    );
    let out = ropelab(&[
        "report",
        folder.to_str().unwrap(),
        "--out",
        folder.join("gptj.csv").to_str().unwrap(),
    ]);
    assert_one_line_error(&out, "another kind of file");
    assert_eq!(std::fs::read(folder.join("gptj.csv")).unwrap(), table);
    assert_eq!(std::fs::read(folder.join("report.html")).unwrap(), page);
    let run = dir.path().join("run");
    let trained = ropelab(&[
        "train",
        "--task",
        "number",
        "--preset",
        "tiny",
        "--steps",
        "2",
        "--out",
        run.to_str().unwrap(),
    ]);
    assert!(trained.status.success(), "{}", stderr(&trained));
    assert_one_line_error(
        &rope_stats(&run.join("rs.csv")),
        "`ropelab pretrained` output",
    );
    assert!(!run.join("rs.csv").exists());
    // A study's pretrained/ folder with its ledger is said to be one, not a run's.
    let study = dir.path().join("study");
    let stage = study.join("pretrained");
    std::fs::create_dir_all(&stage).unwrap();
    std::fs::write(study.join("claims.json"), "[]").unwrap();
    std::fs::write(stage.join("measured.json"), r#"{"files": {}}"#).unwrap();
    let new = stage.join("new.jsonl");
    let out = ropelab(&[
        "pretrained",
        "score",
        "--model",
        model.to_str().unwrap(),
        "--task",
        "letter",
        "--size",
        "1",
        "--n",
        "1",
        "--out",
        new.to_str().unwrap(),
    ]);
    assert_one_line_error(
        &out,
        "holds only what the study's pretrained stage measured",
    );
    assert!(!stderr(&out).contains("run, sweep or experiment"));
    assert!(!new.exists());
    std::fs::copy(dir.path().join("gptj.csv"), run.join("rs.csv")).unwrap();
    let out = ropelab(&["report", run.to_str().unwrap()]);
    assert_one_line_error(&out, "is `ropelab pretrained` output inside the run");
    // `--out -`: standard output holds the JSON Lines alone, the summary goes to standard
    // error (eighth pass, W027).
    let piped = ropelab(&[
        "pretrained",
        "score",
        "--model",
        model.to_str().unwrap(),
        "--task",
        "letter",
        "--n",
        "2",
        "--out",
        "-",
    ]);
    assert!(piped.status.success(), "{}", stderr(&piped));
    let lines = String::from_utf8_lossy(&piped.stdout).into_owned();
    assert_eq!(lines.lines().count(), 8, "{lines}");
    for line in lines.lines() {
        serde_json::from_str::<serde_json::Value>(line).expect(line);
    }
    // Every row names its model; outputs of four models in one directory are not reported as
    // one model's (issue 55).
    let first = std::fs::read_to_string(dir.path().join("qwen2.jsonl")).unwrap();
    let v: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    assert!(v["model"].as_str().unwrap().contains(" sha256:"), "{v}");
    let out = ropelab(&["report", dir.path().to_str().unwrap()]);
    assert_one_line_error(&out, "must come from one model");
    let missing = dir.path().join("nothing-here");
    let out = ropelab(&[
        "pretrained",
        "generate",
        "--model",
        missing.to_str().unwrap(),
        "a",
    ]);
    assert_one_line_error(&out, "nothing-here");
    let not_a_model = dir.path().join("empty");
    std::fs::create_dir(&not_a_model).unwrap();
    let out = ropelab(&[
        "pretrained",
        "generate",
        "--model",
        not_a_model.to_str().unwrap(),
        "a",
    ]);
    assert_one_line_error(&out, "config.json is missing");
    // A Whitespace pre-tokenizer drops spaces: such a tokenizer is refused at load.
    let spaces = dir.path().join("spaces");
    std::fs::create_dir(&spaces).unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixtures.join("llama").join(name), spaces.join(name)).unwrap();
    }
    let text = std::fs::read_to_string(spaces.join("tokenizer.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["pre_tokenizer"] = serde_json::json!({"type": "Whitespace"});
    // (Without the ByteLevel decoder, which would need a ByteLevel pre-tokenizer.)
    json["decoder"] = serde_json::Value::Null;
    std::fs::write(spaces.join("tokenizer.json"), json.to_string()).unwrap();
    let generate = |prompt: &str| {
        ropelab(&[
            "pretrained",
            "generate",
            "--model",
            spaces.to_str().unwrap(),
            "--max-new",
            "2",
            prompt,
        ])
    };
    // A tokenizer that drops the space is refused at load, naming it (twentieth pass,
    // F-S1), before any prompt could tokenize to nothing.
    let out = generate("   ");
    assert_one_line_error(&out, "the character ' ' has no token");
    assert!(
        stderr(&out).contains("spaces/tokenizer.json"),
        "{}",
        stderr(&out)
    );
    assert_one_line_error(
        &ropelab(&[
            "pretrained",
            "generate",
            "--model",
            fixtures.join("llama").to_str().unwrap(),
            "--max-new",
            "2",
            "",
        ]),
        "the prompt is empty",
    );
    // Output under another command's extension would be read as none of ropelab's
    // (twenty-second pass, U1).
    let llama = fixtures.join("llama");
    for (command, out) in [("score", "x.csv"), ("tasks", "y.jsonl")] {
        let target = dir.path().join(out);
        assert_one_line_error(
            &ropelab(&[
                "pretrained",
                command,
                "--model",
                llama.to_str().unwrap(),
                "--task",
                "number",
                "--out",
                target.to_str().unwrap(),
            ]),
            "writes a .",
        );
        assert!(!target.exists());
    }
    let bad_arch = dir.path().join("bert");
    std::fs::create_dir(&bad_arch).unwrap();
    std::fs::write(
        bad_arch.join("config.json"),
        r#"{"architectures": ["BertForMaskedLM"]}"#,
    )
    .unwrap();
    let out = ropelab(&[
        "pretrained",
        "generate",
        "--model",
        bad_arch.to_str().unwrap(),
        "a",
    ]);
    assert_one_line_error(&out, "BertForMaskedLM");
}

/// A reader that closes standard output ends the command quietly, as SIGPIPE would (exit
/// 141), not with a panic's backtrace (fifth pass: `train ... | head -1` panicked).
#[test]
fn a_closed_standard_output_is_no_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ropelab"))
        .args([
            "train",
            "--task",
            "number",
            "--preset",
            "tiny",
            "--steps",
            "3",
            "--out",
            dir.path().join("run").to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The read end closes before the banner is printed.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        matches!(out.status.code(), Some(141) | Some(0)),
        "{:?}: {err}",
        out.status
    );
}

/// `report --out -` and `plot --out -` write the page or figure alone to standard output (the
/// "wrote" line goes to standard error), so a pipe gets a valid document (eighth pass, W019,
/// W020).
#[test]
fn report_and_plot_to_standard_output_are_documents_alone() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let r = run.to_str().unwrap();
    let trained = ropelab(&[
        "train", "--task", "number", "--preset", "tiny", "--steps", "10", "--out", r,
    ]);
    assert!(trained.status.success(), "{}", stderr(&trained));
    let scored = ropelab(&["score", "--run", r, "--samples", "4"]);
    assert!(scored.status.success(), "{}", stderr(&scored));
    let page = ropelab(&["report", r, "--out", "-"]);
    assert!(page.status.success(), "{}", stderr(&page));
    let html = String::from_utf8_lossy(&page.stdout);
    assert!(
        html.trim_end().ends_with("</html>"),
        "{}",
        &html[html.len().saturating_sub(200)..]
    );
    assert!(stderr(&page).contains("wrote -"));
    let figure = ropelab(&["plot", "accuracy", "--dir", r, "--out", "-"]);
    assert!(figure.status.success(), "{}", stderr(&figure));
    roxmltree::Document::parse(&String::from_utf8_lossy(&figure.stdout)).expect("an SVG alone");
}

/// Without `--max-new`, `pretrained generate` takes its count from the model's
/// generation_config.json (`max_new_tokens`, else what `max_length` leaves), and says so when
/// `max_length` leaves nothing after the prompt (twenty-sixth and twenty-seventh passes).
#[test]
fn generation_config_sets_the_count_of_new_tokens() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rope_models/llama");
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture.join(name), dir.path().join(name)).unwrap();
    }
    let generate = |config: &str| {
        std::fs::write(dir.path().join("generation_config.json"), config).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_ropelab"))
            .args(["pretrained", "generate", "--model"])
            .arg(dir.path())
            .arg("w9 t7")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Suppressing every end-of-generation id keeps the count exact.
    let err = generate(r#"{"max_new_tokens": 2, "eos_token_id": null}"#);
    assert!(
        err.contains(", 2 new tokens") || err.contains(" 2 new tokens"),
        "{err}"
    );
    let err = generate(r#"{"max_length": 1}"#);
    assert!(err.contains("max_length 1 leaves no token"), "{err}");
}

/// A discrepancy curve whose worst input's margin exceeds its best input's is no curve the
/// theory writes: `plot` refuses it, naming the row (twenty-seventh pass).
#[test]
fn a_discrepancy_curve_must_keep_its_worst_margin_below_its_best() {
    let dir = tempfile::tempdir().unwrap();
    let theory = dir.path().join("theory");
    std::fs::create_dir_all(&theory).unwrap();
    let csv = theory.join("discrepancy-index.csv");
    let c = csv.to_str().unwrap();
    let made = ropelab(&[
        "theory",
        "discrepancy",
        "--mechanism",
        "index",
        "--theta",
        "0.866",
        "--max-n",
        "20",
        "--out",
        c,
    ]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let svg = dir.path().join("f.svg");
    let plot = || {
        ropelab(&[
            "plot",
            "discrepancy-index",
            "--dir",
            dir.path().to_str().unwrap(),
            "--out",
            svg.to_str().unwrap(),
        ])
    };
    assert!(plot().status.success());
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut cells: Vec<String> = lines[5].split(',').map(str::to_owned).collect();
    cells[1] = "0.5".into();
    lines[5] = cells.join(",");
    std::fs::write(&csv, lines.join("\n") + "\n").unwrap();
    let got = plot();
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(
        !got.status.success() && err.contains("at n = 5 the worst input's margin"),
        "{err}"
    );
}
