//! Resource bombs: every command that could allocate or write without bound estimates its
//! memory and disk from its arguments first, and is refused in one line naming the estimate
//! and what the machine has, before allocating (each command here runs under a 2 GB address
//! space limit, so a real attempt would abort instead of printing the refusal) or writing.

mod common;

use common::ok;
use std::path::Path;
use std::process::{Command, Output};

/// `ropelab args` under `ulimit -v` of 2 GB (Linux `sh`).
fn limited(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_ropelab"))
        .args(args)
        .output()
        .expect("sh runs")
}

/// A one-line refusal by the estimate of `kind` ("memory" or "disk").
fn refused(out: &Output, kind: &str) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "expected a refusal: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains("would need about"), "{err}");
    assert!(err.contains(&format!(" of {kind} (")), "{err}");
    assert!(err.contains("--force"), "{err}");
    err
}

fn tiny_run(root: &Path) -> String {
    let run = root.join("run").to_str().unwrap().to_owned();
    ok(limited(&[
        "train", "--task", "number", "--preset", "tiny", "--steps", "2", "--out", &run,
    ]));
    run
}

#[test]
fn commands_that_would_exhaust_memory_are_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let qwen2 = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/rope_models/qwen2.gguf"
    );
    let cases: Vec<Vec<String>> = vec![
        // 3.2 GB: less than this machine has, more than the 2 GB address space the command
        // may use (seventh pass, R7: it aborted in an allocation).
        vec![
            "pretrained",
            "rope-stats",
            "--model",
            qwen2,
            "--layers",
            "0",
            "--lengths",
            "100000000",
            "--draws",
            "5",
            "--out",
            &out("r7.csv"),
        ],
        vec!["eval", "--run", &run, "--extra", "100000"],
        vec!["score", "--run", &run, "--samples", "1000000000"],
        vec!["lengthgen", "--run", &run, "--extras", "0,1000000"],
        vec![
            "theory",
            "margins",
            "--run",
            &run,
            "--extras",
            "100000",
            "--out",
            &out("m.csv"),
        ],
        vec![
            "theory",
            "rope-stats",
            "--draws",
            "1000000000",
            "--out",
            &out("r.csv"),
        ],
        vec![
            "theory",
            "construct",
            "--mechanism",
            "index",
            "--samples",
            "100000000000",
        ],
        vec!["hops", "--run", &run, "--n", "1000000000"],
        vec!["hops", "--hand", "doubling", "--n", "1000000000"],
        vec!["probe", "--run", &run, "--n", "1000000000"],
        // The layer sets' samples (tenth pass, S3).
        vec!["probe", "--run", &run, "--set-samples", "1000000000000"],
        vec!["bench", "train", "--seq", "1000000"],
        vec!["bench", "rope", "--m", "10000000000"],
        vec!["bench", "rope", "--h", "1000000000"],
        vec![
            "gen",
            "letter",
            "--prompt",
            "--n",
            "10000000000",
            "--out",
            &out("p.jsonl"),
        ],
    ]
    .into_iter()
    .map(|c| c.into_iter().map(str::to_owned).collect())
    .collect();
    for case in &cases {
        let args: Vec<&str> = case.iter().map(String::as_str).collect();
        // What the machine has now, or (past the 2 GB limit) all the process could have.
        let err = refused(&limited(&args), "memory");
        assert!(
            err.contains("GB is available") || err.contains("GB: the machine's memory and swap"),
            "{args:?}: {err}"
        );
    }
    // Nothing was written besides the run.
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["run"]);
    assert!(!Path::new(&run).join("scores.jsonl").exists());
    assert!(!Path::new(&run).join("eval").exists());
}

#[test]
fn huge_models_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    // 100 layers at d_model 4096 and a vocabulary of 10^8: terabytes of parameters.
    let config = dir.path().join("huge.toml");
    let tiny = dir.path().join("tiny");
    ok(limited(&[
        "train",
        "--task",
        "letter",
        "--preset",
        "tiny",
        "--steps",
        "1",
        "--out",
        tiny.to_str().unwrap(),
    ]));
    let text = std::fs::read_to_string(tiny.join("config.toml")).unwrap();
    let text = text
        .replace("n_layers = 2", "n_layers = 100")
        .replace("d_model = 16", "d_model = 4096")
        .replace("d_mlp = 32", "d_mlp = 16384");
    let text = with_vocab(&text, 100_000_000);
    std::fs::write(&config, text).unwrap();
    let run = dir.path().join("huge-run");
    let err = refused(
        &limited(&[
            "train",
            "--config",
            config.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
        ]),
        "memory",
    );
    assert!(err.contains("parameters"), "{err}");
    assert!(!run.exists(), "the refused run left {}", run.display());
}

/// `text` with its `vocab_size = N` line set to `vocab`.
fn with_vocab(text: &str, vocab: usize) -> String {
    text.lines()
        .map(|l| {
            if l.starts_with("vocab_size = ") {
                format!("vocab_size = {vocab}")
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn commands_that_would_fill_the_disk_are_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.jsonl");
    let err = refused(
        &limited(&[
            "gen",
            "number",
            "--n",
            "10000000000",
            "--out",
            data.to_str().unwrap(),
        ]),
        "disk",
    );
    assert!(err.contains("is free at"), "{err}");
    assert!(!data.exists());
    // A checkpoint every 10 steps for 10^10 steps...
    let run = dir.path().join("long");
    let long = [
        "train",
        "--task",
        "number",
        "--preset",
        "tiny",
        "--steps",
        "10000000000",
        "--out",
        run.to_str().unwrap(),
    ];
    let err = refused(&limited(&long), "disk");
    assert!(err.contains("checkpoints kept"), "{err}");
    assert!(!run.exists());
    // ... fits once retention keeps the last few (the run itself is not started here: the
    // refusal is what is tested, so a tiny run with the same flags shows they are accepted).
    let kept = dir.path().join("kept");
    ok(limited(&[
        "train",
        "--task",
        "number",
        "--preset",
        "tiny",
        "--steps",
        "20",
        "--keep-last",
        "2",
        "--out",
        kept.to_str().unwrap(),
    ]));
}

#[test]
fn force_skips_the_estimate_but_not_memory_the_process_cannot_have() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    // Forced, a need past all the process could have (here the 2 GB address space) is still
    // refused, in one line, with nothing written: a failed allocation would abort it (fifteenth
    // pass, P-1 to P-5).
    let cases: Vec<Vec<String>> = vec![
        vec!["bench", "rope", "--m", "10000000000", "--draws", "1"],
        vec![
            "theory",
            "rope-stats",
            "--draws",
            "41000000",
            "--out",
            &out("r.csv"),
        ],
        vec![
            "theory",
            "construct",
            "--mechanism",
            "index",
            "--theta",
            "0.1",
            "--samples",
            "1000000000000",
            "--long",
            "10",
        ],
        vec![
            "theory",
            "margins",
            "--run",
            &run,
            "--extras",
            "1000000000000",
            "--samples",
            "2",
            "--out",
            &out("m.csv"),
        ],
    ]
    .into_iter()
    .map(|c| c.into_iter().map(str::to_owned).collect())
    .collect();
    for case in &cases {
        let mut args = vec!["--force"];
        args.extend(case.iter().map(String::as_str));
        let got = limited(&args);
        let err = String::from_utf8_lossy(&got.stderr);
        assert_eq!(got.status.code(), Some(1), "{case:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{case:?}: {err}");
        assert!(
            err.contains("--force cannot make it fit"),
            "{case:?}: {err}"
        );
    }
    assert!(!Path::new(&out("r.csv")).exists() && !Path::new(&out("m.csv")).exists());
    // Unforced, such a need says at once that --force cannot help (sixteenth pass, B20).
    let got = limited(&["bench", "rope", "--m", "10000000000", "--draws", "1"]);
    assert!(String::from_utf8_lossy(&got.stderr).contains("--force cannot make it fit"));
    // Within it, --force runs what the estimate would refuse for its time: the command starts
    // (and is stopped here after two seconds).
    let got = Command::new("timeout")
        .args([
            "2",
            env!("CARGO_BIN_EXE_ropelab"),
            "--force",
            "eval",
            "--run",
            &run,
        ])
        .args(["--n", "4000000", "--extra", "6500"])
        .output()
        .expect("timeout runs");
    let err = String::from_utf8_lossy(&got.stderr);
    assert_eq!(got.status.code(), Some(124), "{err}");
    let unforced = limited(&["eval", "--run", &run, "--n", "4000000", "--extra", "6500"]);
    assert!(String::from_utf8_lossy(&unforced.stderr).contains("would take at least"));
}

#[test]
fn commands_that_would_run_for_days_are_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    // The tiny Llama fixture with a context long enough for the task prompts (RoPE learns no
    // positions, so only the config changes).
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/rope_models/llama");
    let long = dir.path().join("model");
    std::fs::create_dir(&long).unwrap();
    for file in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture.join(file), long.join(file)).unwrap();
    }
    let config = std::fs::read_to_string(fixture.join("config.json")).unwrap();
    let config = config.replace(
        "\"max_position_embeddings\": 128",
        "\"max_position_embeddings\": 4096",
    );
    std::fs::write(long.join("config.json"), config).unwrap();
    let model = long.to_str().unwrap().to_owned();
    let out = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    // 64 periods of about 4,000 residues each, in four formats, at 16.8 million positions:
    // some 136 hours (eight periods were 17, which the 24-hour limit lets through with a note).
    let periods = (4033..=4096)
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let cases: Vec<Vec<String>> = vec![
        vec![
            "lengthgen",
            "--run",
            &run,
            "--n",
            "1000000000000",
            "--out",
            &out("l.csv"),
        ],
        vec![
            "mask",
            "--run",
            &run,
            "--n",
            "1000000000000",
            "--out",
            &out("k.csv"),
        ],
        vec![
            "theory",
            "margins",
            "--run",
            &run,
            "--samples",
            "1000000000000",
            "--out",
            &out("m.csv"),
        ],
        vec!["eval", "--run", &run, "--n", "100000000000"],
        vec![
            "offset",
            "--per-length",
            "1000000000000",
            "--steps",
            "2",
            "--out",
            &out("o"),
        ],
        vec![
            "languages",
            "--per-length",
            "1000000000000",
            "--steps",
            "2",
            "--out",
            &out("g"),
        ],
        // Drawing samples and reading prompts (issue 55, third pass): `gen` streaming to
        // standard output holds one sample at a time, so only time can bound it.
        vec!["gen", "number", "--n", "100000000000000", "--out", "-"],
        vec!["bench", "gen", "--n", "100000000000000"],
        vec![
            "pretrained",
            "tasks",
            "--model",
            &model,
            "--task",
            "number",
            "--sizes",
            "12",
            "--n",
            "10000000000",
            "--out",
            &out("t.csv"),
        ],
        vec![
            "pretrained",
            "index-task",
            "--model",
            &model,
            "--lengths",
            "64",
            "--n",
            "100000000000",
            "--out",
            &out("i.csv"),
        ],
        // The theory statistics' time (eighth pass, X043, X048, Y008, X082).
        vec![
            "theory",
            "rope-stats",
            "--d",
            "16384",
            "--bases",
            "10000,20000",
            "--lengths",
            "4194304",
            "--draws",
            "1000",
            "--out",
            &out("x.csv"),
        ],
        vec![
            "theory",
            "periodic",
            "--m",
            &periods,
            "--formats",
            "f32,f64,bf16,f16",
            "--len",
            "16777216",
            "--out",
            &out("p.csv"),
        ],
        vec![
            "bench",
            "rope",
            "--m",
            "1024",
            "--h",
            "8",
            "--draws",
            "1000000000000",
        ],
        // Tiny draws, many of them: their set-up is counted (twenty-third pass, BN).
        vec![
            "bench",
            "rope",
            "--m",
            "8",
            "--h",
            "2",
            "--draws",
            "1000000000000",
        ],
    ]
    .into_iter()
    .map(|c| c.into_iter().map(str::to_owned).collect())
    .collect();
    for case in &cases {
        let args: Vec<&str> = case.iter().map(String::as_str).collect();
        let got = limited(&args);
        let err = String::from_utf8_lossy(&got.stderr).into_owned();
        assert_eq!(got.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err:?}");
        // The time estimate, or the memory one where the 2 GB address space this runs under
        // is the smaller bound (the estimate counts the process's own limit), or the bound on
        // test samples every measurement shares (twenty-sixth pass), checked before either.
        assert!(
            err.contains("more than ropelab measures (4194304 at most)")
                || ((err.contains("would take at least")
                    || err.contains("but 2.0 GB is available")
                    || err.contains("can have at all (2.0 GB"))
                    && err.contains("--force")),
            "{args:?}: {err}"
        );
    }
    // Scoring a tiny model's prompts is bounded by their ids' memory before their time, and a
    // prompt beyond the model's context is refused before any is read.
    let scores = out("s.jsonl");
    for (size, n) in [("12", "100000000000"), ("4000", "1")] {
        let args = [
            "pretrained",
            "score",
            "--model",
            &model,
            "--task",
            "number",
            "--size",
            size,
            "--n",
            n,
            "--out",
            &scores,
        ];
        if let Some(failure) = refused_up_front(&args, Path::new(&scores), "pretrained score") {
            panic!("{failure}");
        }
    }
    let canonical = limited(&[
        "canonical",
        "--task",
        "index",
        "--d-model",
        "1000000000",
        "--out",
        &out("c"),
    ]);
    let err = String::from_utf8_lossy(&canonical.stderr);
    assert!(!canonical.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("d_model must be even and in 2..=65536"),
        "{err}"
    );
    // Nothing was written besides the run.
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["model", "run"]);
}

/// `ropelab args` under a 2 GB address-space limit and a 30 s wall-clock limit (a size that
/// slipped past the estimates would start its work, and be killed): it must be refused up
/// front, with status 1 and one line on standard error (or 2, clap's usage error, for a flag
/// out of its range), no panic, and `out` not created. Returns what went wrong, if anything.
fn refused_up_front(args: &[&str], out: &Path, what: &str) -> Option<String> {
    let got = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2000000 && exec timeout 30 \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_ropelab"))
        .args(args)
        .output()
        .expect("sh runs");
    let err = String::from_utf8_lossy(&got.stderr);
    let first = err.lines().next().unwrap_or("").to_owned();
    let wrong = match got.status.code() {
        _ if err.contains("panicked") => Some(format!("panicked: {first}")),
        Some(1) if err.trim_end().lines().count() != 1 => Some(format!("not one line: {err:?}")),
        Some(1) | Some(2) if out.exists() => Some(format!("{} was written", out.display())),
        Some(1) | Some(2) => None,
        code => Some(format!("exit {code:?}: {first}")),
    };
    wrong.map(|w| format!("{what}: {w}"))
}

/// Fails with every case that was not refused up front.
fn all_refused(failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{} not refused up front:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The numeric leaves of a TOML table as (dotted key, index in its array or None).
fn numeric_keys(table: &toml::Table, prefix: &str) -> Vec<(String, Option<usize>)> {
    let mut out = vec![];
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Table(t) => out.extend(numeric_keys(t, &key)),
            toml::Value::Integer(_) => out.push((key, None)),
            toml::Value::Array(a) if a.iter().all(|x| x.is_integer()) && !a.is_empty() => {
                out.push((key, Some(a.len() - 1)))
            }
            _ => {}
        }
    }
    out
}

/// `table` with the integer at `key` (or the last element of the list there) set to `value`.
fn with_value(table: &toml::Table, key: &str, last: Option<usize>, value: i64) -> toml::Table {
    let mut t = table.clone();
    let parts: Vec<&str> = key.split('.').collect();
    let mut at = &mut t;
    for p in &parts[..parts.len() - 1] {
        at = at.get_mut(*p).unwrap().as_table_mut().unwrap();
    }
    let slot = at.get_mut(parts[parts.len() - 1]).unwrap();
    match last {
        Some(i) => slot.as_array_mut().unwrap()[i] = toml::Value::Integer(value),
        None => *slot = toml::Value::Integer(value),
    }
    t
}

/// 10^12: a count no experiment here could finish, far beyond memory as a length.
const ABSURD: i64 = 1_000_000_000_000;

/// Every integer key of the default study config that sizes work (steps, samples, lengths,
/// model dimensions, windows, draws, prompts), set to 10^12, is refused before anything is
/// written (issue 55, item 1). The keys that are not sizes are listed with the reason, so a new
/// key fails this test until it is classified.
#[test]
fn every_size_in_a_study_config_is_refused_up_front() {
    // Not sizes: labels, or schedules and thresholds whose large values do less work.
    let not_sizes = [
        ("seeds", "a seed is a label"),
        ("offset.seeds", "a seed is a label"),
        ("canonical.seeds", "a seed is a label"),
        ("train.eval_every", "larger evaluates less often"),
        ("train.save_every", "larger keeps fewer checkpoints"),
        ("train.warmup", "a schedule's length, not work"),
        ("claims.letter_length", "a threshold on a measured length"),
        ("claims.retrieval_n", "a threshold on a measured length"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let quick: toml::Table = toml::from_str(include_str!("../../../configs/quick.toml")).unwrap();
    let keys = numeric_keys(&quick, "");
    let (mut tried, mut failures) = (0, vec![]);
    for (key, last) in &keys {
        if not_sizes.iter().any(|(k, _)| k == key) {
            continue;
        }
        let config = dir.path().join(format!("{key}.toml"));
        let text = toml::to_string(&with_value(&quick, key, *last, ABSURD)).unwrap();
        std::fs::write(&config, text).unwrap();
        let out = dir.path().join(format!("{key}-out"));
        failures.extend(refused_up_front(
            &[
                "reproduce",
                "--config",
                config.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
            &out,
            key,
        ));
        tried += 1;
    }
    all_refused(failures);
    assert!(tried >= 30, "only {tried} keys tried: {keys:?}");
    // Every listed non-size is a key of the config (the list does not go stale).
    for (k, _) in not_sizes {
        assert!(
            keys.iter().any(|(key, _)| key == k),
            "{k} is not in the config"
        );
    }
}

/// Every integer key of a sweep's run config that sizes work, in `[base]`, and every key of its
/// `[measure]` table, set to 10^12, is refused before anything is written (issue 55, items 1).
#[test]
fn every_size_in_a_sweep_file_is_refused_up_front() {
    let not_sizes = [
        ("seed", "a seed is a label"),
        ("optim.warmup", "a schedule's length, not work"),
        ("optim.eval_every", "larger evaluates less often"),
        ("optim.save_every", "larger keeps fewer checkpoints"),
        ("optim.log_every", "larger logs less often"),
        (
            "data.train",
            "training samples are drawn by index as the steps need them: a larger set does no \
             more work",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let run = tiny_run(dir.path());
    let base: toml::Table =
        toml::from_str(&std::fs::read_to_string(Path::new(&run).join("config.toml")).unwrap())
            .unwrap();
    let sweep = |name: &str, body: &str| -> (std::path::PathBuf, std::path::PathBuf) {
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(&file, body).unwrap();
        (file, dir.path().join(format!("{name}-out")))
    };
    let (mut tried, mut failures) = (0, vec![]);
    for (key, last) in numeric_keys(&base, "") {
        if not_sizes.iter().any(|(k, _)| *k == key) {
            continue;
        }
        let value = match last {
            Some(_) => "[1, 2, 3, 1000000000000]".to_string(),
            None => ABSURD.to_string(),
        };
        let (file, out) = sweep(
            &key,
            &format!(
                "name = \"s\"\npreset = \"tiny\"\ntask = \"number\"\n[base]\n{key} = {value}\n\
                 [[axis]]\nkey = \"seed\"\nvalues = [0]\n"
            ),
        );
        let args = [
            "sweep",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        failures.extend(refused_up_front(&args, &out, &key));
        tried += 1;
    }
    assert!(tried >= 10, "only {tried} keys tried");
    // `--list` times a few steps of each job's model: a model beyond the machine is refused
    // before it is built.
    let (file, out) = sweep(
        "list-wide",
        "name = \"s\"\npreset = \"tiny\"\ntask = \"number\"\n[base]\nmodel.d_model = 65536\n\
         model.n_heads = 2\n[[axis]]\nkey = \"seed\"\nvalues = [0]\n",
    );
    let args = [
        "sweep",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--list",
    ];
    failures.extend(refused_up_front(
        &args,
        &out,
        "sweep --list of a wide model",
    ));
    // The [measure] table, on the tasks that read each key.
    for (task, measure) in [
        ("number", "extras = [0, 100000000]"),
        ("offset", "lengths = [64, 1000000000000]"),
        ("offset", "per_length = 1000000000000"),
        ("language", "per_length = 1000000000000"),
        ("canonical", "heads = true\nhead_samples = 1000000000000"),
        ("canonical", "per_length = 1000000000000"),
    ] {
        let name = format!("{task}-{}", measure.split(' ').next().unwrap());
        let (file, out) = sweep(
            &name,
            &format!(
                "name = \"s\"\npreset = \"tiny\"\ntask = \"{task}\"\n[base]\noptim.steps = 2\n\
                 [measure]\n{measure}\n[[axis]]\nkey = \"seed\"\nvalues = [0]\n"
            ),
        );
        let args = [
            "sweep",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        failures.extend(refused_up_front(
            &args,
            &out,
            &format!("{task} [measure] {measure}"),
        ));
    }
    all_refused(failures);
}

/// Every flag of the experiment commands that sizes work, set to 10^12 (or a length list
/// ending there), is refused before anything is written (issue 55, item 1): the transfer stage
/// of `bias` included.
#[test]
fn every_size_flag_of_the_experiments_is_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let big = "1000000000000";
    let cases: Vec<Vec<&str>> = vec![
        vec!["bias", "--steps", big],
        vec!["bias", "--transfer-steps", big],
        vec!["offset", "--steps", big],
        vec!["offset", "--per-length", big],
        vec!["offset", "--test-lens", "16,1000000000000"],
        vec!["offset", "--train-len", big],
        vec!["offset", "--layers", big],
        vec!["offset", "--heads", big],
        vec!["offset", "--k", big],
        vec!["languages", "--steps", big],
        vec!["languages", "--per-length", big],
        vec!["languages", "--test-lengths", "100,1000000000000"],
        vec!["canonical", "--task", "index", "--steps", big],
        vec!["canonical", "--task", "index", "--len", big],
        vec!["canonical", "--task", "index", "--symbols", big],
        vec!["canonical", "--task", "index", "--attributes", big],
        vec!["canonical", "--task", "index", "--d-model", big],
        // (--window is not a size: a window wider than the head is clamped to its planes.)
        vec![
            "train", "--task", "number", "--preset", "tiny", "--steps", big,
        ],
    ];
    let mut failures = vec![];
    for (i, case) in cases.iter().enumerate() {
        let out = dir.path().join(format!("out-{i}"));
        let mut args = case.clone();
        args.extend(["--out", out.to_str().unwrap()]);
        failures.extend(refused_up_front(&args, &out, &case.join(" ")));
    }
    all_refused(failures);
}
