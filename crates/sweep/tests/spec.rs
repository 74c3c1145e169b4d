//! Sweep files: product and list axes, stable ids, shards that partition the jobs, and bad
//! input as one-line errors naming the key.

use proptest::prelude::*;
use ropelab_sweep::spec::shard;
use ropelab_sweep::Sweep;

const BASE: &str = "name = \"t\"\npreset = \"tiny\"\ntask = \"number\"\n[base]\noptim.steps = 3\n";

fn sweep(axes: &str) -> Sweep {
    Sweep::parse(&format!("{BASE}{axes}"), "t.toml").unwrap()
}

fn err(text: &str) -> String {
    let e = match Sweep::parse(text, "t.toml") {
        Err(e) => e.to_string(),
        Ok(s) => s.jobs().unwrap_err().to_string(),
    };
    assert_eq!(e.lines().count(), 1, "{e}");
    e
}

#[test]
fn axes_expand_to_a_product_with_stable_ids() {
    let s = sweep(
        "[[axis]]\nkey = \"seed\"\nvalues = [0, 1]\n\
         [[axis]]\nkeys = [\"model.d_model\", \"model.d_mlp\"]\nvalues = [[16, 32], [32, 24]]\n",
    );
    let jobs = s.jobs().unwrap();
    assert_eq!(jobs.len(), 4);
    let j = jobs
        .iter()
        .find(|j| j.param_text() == ["seed=1", "model.d_model=32", "model.d_mlp=24"])
        .unwrap();
    assert_eq!(j.config.seed, 1);
    assert_eq!((j.config.model.d_model, j.config.model.d_mlp), (32, 24));
    assert_eq!(j.config.optim.steps, 3, "[base] applies to every job");
    // Adding a value keeps every other job's id; reordering values changes nothing.
    let more = sweep(
        "[[axis]]\nkey = \"seed\"\nvalues = [2, 1, 0]\n\
         [[axis]]\nkeys = [\"model.d_model\", \"model.d_mlp\"]\nvalues = [[32, 24], [16, 32]]\n",
    );
    let ids: Vec<String> = more.jobs().unwrap().iter().map(|j| j.id.clone()).collect();
    assert_eq!(ids.len(), 6);
    for j in &jobs {
        assert!(ids.contains(&j.id), "{} renumbered", j.id);
    }
    // A sweep without axes is one job, the base.
    assert_eq!(sweep("").jobs().unwrap().len(), 1);
}

#[test]
fn bad_sweeps_are_one_line_errors_naming_the_key() {
    let e = err(&format!(
        "{BASE}[[axis]]\nkey = \"optim.lrr\"\nvalues = [1]\n"
    ));
    assert!(
        e.contains("unknown config key optim.lrr: [optim] has no `lrr`"),
        "{e}"
    );
    let e = err(&format!("{BASE}[[axis]]\nkey = \"seed\"\nvalues = []\n"));
    assert!(e.contains("axis 1 (seed): `values` is empty"), "{e}");
    let e = err(&format!(
        "{BASE}[[axis]]\nkeys = [\"seed\", \"optim.lr\"]\nvalues = [[1]]\n"
    ));
    assert!(e.contains("each value must list 2 values"), "{e}");
    let e = err("name = \"t\"\ntask = \"number\"\n[base]\nmodle.d_model = 3\n");
    assert!(e.contains("[base] unknown config key modle.d_model"), "{e}");
    let e = err(&format!(
        "{BASE}[[axis]]\nkey = \"optim.lr\"\nvalues = [-1.0]\n"
    ));
    assert!(e.contains("optim.lr=-1"), "{e}");
    let e = err("name = \"t\"\n");
    assert!(e.contains("give the base run config"), "{e}");
    let e = err(&format!(
        "{BASE}[[axis]]\nkey = \"seed\"\nvalues = [1, 1]\n"
    ));
    assert!(e.contains("two jobs have the same parameters"), "{e}");
    let e = err(&format!("{BASE}colour = 1\n"));
    assert!(e.contains("colour"), "{e}");
    // A value of the wrong type names the job and the key, not a line of the job's generated
    // config (sixteenth pass, W6).
    let e = err(&format!(
        "{BASE}[[axis]]\nkey = \"optim.lr\"\nvalues = [0.003, \"0.003\"]\n"
    ));
    assert!(
        e.contains("optim.lr=0.003): [optim] lr: invalid type") && !e.contains("line "),
        "{e}"
    );
}

#[test]
fn vocabulary_axes_set_the_models_vocabulary() {
    // One axis pairs each task with its own sizes (the other task's at their defaults).
    let s = sweep(
        "[[axis]]\nkeys = [\"task\", \"layout.letters\", \"layout.numbers\", \"layout.offsets\"]\n\
         values = [[\"letter\", 16, 16, 16], [\"letter\", 5, 12, 16], [\"number\", 8, 8, 16], \
         [\"number\", 8, 8, 40]]\n",
    );
    let jobs = s.jobs().unwrap();
    assert_eq!(jobs.len(), 4);
    let vocab = |text: &[&str]| {
        let j = jobs.iter().find(|j| j.param_text() == text).unwrap();
        (j.config.task.as_str(), j.config.model.vocab_size)
    };
    let row = |task, l, n, o| {
        [
            format!("task={task}"),
            format!("layout.letters={l}"),
            format!("layout.numbers={n}"),
            format!("layout.offsets={o}"),
        ]
    };
    let ask = |r: [String; 4]| vocab(&r.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(ask(row("letter", 16, 16, 16)), ("letter", 1 + 256 + 256));
    assert_eq!(ask(row("letter", 5, 12, 16)), ("letter", 1 + 60 + 25));
    assert_eq!(ask(row("number", 8, 8, 16)), ("number", 137));
    assert_eq!(ask(row("number", 8, 8, 40)), ("number", 1 + 40 + 120));
    // A product of the task with the other task's size would give jobs that differ only in a
    // size their task ignores: refused naming the job and the key.
    let e = err(&format!(
        "{BASE}[[axis]]\nkey = \"task\"\nvalues = [\"number\", \"letter\"]\n\
         [[axis]]\nkey = \"layout.offsets\"\nvalues = [16, 40]\n"
    ));
    assert!(
        e.contains("task=letter") && e.contains("layout.offsets = 40"),
        "{e}"
    );
    // A vocabulary the layout cannot use is a one-line error naming the key.
    let e = err(&format!(
        "{BASE}[[axis]]\nkey = \"layout.offsets\"\nvalues = [4]\n"
    ));
    assert!(e.contains("offsets = 4"), "{e}");
    let letter = BASE.replace("\"number\"", "\"letter\"");
    let e = err(&format!(
        "{letter}[[axis]]\nkey = \"layout.letters\"\nvalues = [4]\n"
    ));
    assert!(e.contains("4 hops need 4 distinct chain letters"), "{e}");
}

proptest! {
    #[test]
    fn shards_partition_the_jobs(seeds in 1usize..7, lrs in 1usize..4, n in 1usize..9) {
        let seeds: Vec<String> = (0..seeds).map(|s| s.to_string()).collect();
        let lrs: Vec<String> = (0..lrs).map(|i| format!("{}.0e-3", i + 1)).collect();
        let s = sweep(&format!(
            "[[axis]]\nkey = \"seed\"\nvalues = [{}]\n[[axis]]\nkey = \"optim.lr\"\nvalues = [{}]\n",
            seeds.join(", "),
            lrs.join(", ")
        ));
        let jobs = s.jobs().unwrap();
        let mut seen: Vec<String> = (0..n)
            .flat_map(|i| shard(&jobs, i, n).into_iter().map(|j| j.id.clone()))
            .collect();
        seen.sort();
        let mut all: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
        all.sort();
        prop_assert_eq!(seen, all);
    }
}

/// A key listed twice in one axis, or set both in `[base]` and on an axis, is refused: one of
/// its values would be dropped without a word (issue 55, third pass).
#[test]
fn a_key_set_twice_is_refused() {
    let e = err(&format!(
        "{BASE}[[axis]]\nkeys = [\"seed\", \"seed\"]\nvalues = [[0, 1]]\n"
    ));
    assert!(e.contains("key seed is listed twice"), "{e}");
    let e = err(&format!(
        "{BASE}[[axis]]\nkey = \"optim.steps\"\nvalues = [1, 2]\n"
    ));
    assert!(e.contains("optim.steps is also set in [base]"), "{e}");
}

/// A `[measure]` key that no job of the sweep reads is refused naming it and its readers,
/// instead of being ignored; the same key is accepted when some job reads it (issue 55, third
/// pass).
#[test]
fn a_measure_key_no_job_reads_is_refused() {
    for (measure, readers) in [
        ("lengths = [64]", "language, offset, ambiguous"),
        ("per_length = 8", "language, offset, ambiguous, canonical"),
        ("heads = true", "language, offset, ambiguous, canonical"),
        ("head_samples = 8", "canonical"),
    ] {
        let e = err(&format!("{BASE}[measure]\n{measure}\n"));
        assert!(
            e.contains(measure.split(' ').next().unwrap()) && e.contains(readers),
            "{measure}: {e}"
        );
    }
    // The number task reads the extras; a task axis with an offset job reads the lengths.
    assert!(sweep("[measure]\nextras = [0, 4]\n").jobs().is_ok());
    let offset = "name = \"t\"\npreset = \"tiny\"\ntask = \"offset\"\n[measure]\nlengths = [64]\n";
    let e = Sweep::parse(offset, "t.toml")
        .unwrap()
        .jobs()
        .err()
        .map(|e| e.to_string());
    assert!(e.as_deref().is_none_or(|e| !e.contains("read by")), "{e:?}");
    let letter = "name = \"t\"\npreset = \"tiny\"\ntask = \"offset\"\n[measure]\nextras = [0, 4]\n";
    assert!(err(letter).contains("read by number, letter jobs only"));
}

/// A language job measured with `heads = true` must be tested far enough beyond its training
/// lengths for every residue of the MOD heads' longest period: refused when the sweep is
/// read, not after training (sixth pass, A406).
#[test]
fn language_heads_need_seven_positions_beyond_training() {
    let file = |lengths: &str| {
        format!(
            "name = \"t\"\npreset = \"tiny\"\ntask = \"language\"\n\
             [measure]\nlengths = {lengths}\nheads = true\n"
        )
    };
    let jobs = |text: &str| Sweep::parse(text, "t.toml").and_then(|s| s.jobs());
    let Err(e) = jobs(&file("[41, 42]")) else {
        panic!("too short a test was accepted")
    };
    let e = e.to_string();
    assert!(
        e.contains("on at least 7 positions, but the longest tested length is 42"),
        "{e}"
    );
    assert!(jobs(&file("[41, 100]")).is_ok());
}

/// Test lengths where every string of the language has one label (odd lengths of `(ab)*`:
/// non-members only) would count a constant "no" as generalising: refused when the sweep is
/// read (issue 55, f07).
#[test]
fn language_test_lengths_need_both_labels() {
    let file = |lengths: &str| {
        format!(
            "name = \"t\"\npreset = \"tiny\"\ntask = \"language\"\n[base]\n\
             language.name = \"ab-star\"\n[measure]\nlengths = {lengths}\n"
        )
    };
    let jobs = |text: &str| Sweep::parse(text, "t.toml").and_then(|s| s.jobs());
    let Err(e) = jobs(&file("[41, 43, 45]")) else {
        panic!("odd lengths of (ab)* were accepted")
    };
    assert!(e.to_string().contains("answers no is always right"), "{e}");
    assert!(jobs(&file("[41, 42]")).is_ok());
}
