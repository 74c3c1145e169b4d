//! The expressivity experiment end to end on a tiny grid: files, N* recomputed from the
//! per-length accuracies, every head's MOD contrasts, the offset rows, and a rerun that reuses
//! every result.

use ropelab_study::languages::{run, Experiment, Pe, Protocol, OFFSET_K, OFFSET_SCALES, PERIODS};
use ropelab_study::Quiet;
use ropelab_tasks::Language;

#[test]
fn a_tiny_grid_writes_nstar_accuracy_heads_and_offsets_and_reruns_from_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = Experiment::new(
        Protocol::Quick,
        Some(vec![Language::EndsA, Language::Parity]),
        Some(vec![Pe::RopePeriodic, Pe::Rope(1e4)]),
        Some(vec![3]),
        Some(vec![3e-3]),
    )
    .unwrap();
    e.steps = 30;
    e.batch = 16;
    e.train_lengths = [1, 6];
    e.test_lengths = vec![7, 9, 16];
    e.per_length = 8;
    let outcome = run(&e, dir.path(), None, &Quiet).unwrap();
    let rows = &outcome.nstar;
    assert_eq!(rows.len(), 4);

    let nstar = std::fs::read_to_string(dir.path().join("nstar.csv")).unwrap();
    assert_eq!(
        nstar.lines().next().unwrap(),
        "language,pe,base,seed,lr,train_accuracy,accuracy,n_star,max_len"
    );
    let accuracy = std::fs::read_to_string(dir.path().join("accuracy.csv")).unwrap();
    let lines: Vec<Vec<String>> = accuracy
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    // 6 training lengths and 3 test lengths per run.
    assert_eq!(lines.len(), 4 * 9);
    for r in rows {
        assert_eq!(r.max_len, 16);
        let mine: Vec<&Vec<String>> = lines
            .iter()
            .filter(|l| l[0] == r.language && l[1] == r.pe)
            .collect();
        assert_eq!(mine.len(), 9);
        // N* from the CSV: the last length of the leading run of perfect test lengths (the
        // longest training length, 6, when there is none).
        let mut want = 6;
        for l in mine.iter().filter(|l| l[8] == "false") {
            if l[7].parse::<f64>().unwrap() < 1.0 {
                break;
            }
            want = l[5].parse().unwrap();
        }
        assert_eq!(r.n_star, want, "{r:?}");
        let test: Vec<f64> = mine
            .iter()
            .filter(|l| l[8] == "false")
            .map(|l| l[7].parse().unwrap())
            .collect();
        assert_eq!(test.len(), 3);
        let mean = test.iter().sum::<f64>() / 3.0;
        assert!((mean - r.accuracy).abs() < 1e-12);
    }
    assert!(rows.iter().any(|r| r.pe == "rope" && r.base == Some(1e4)));

    // Every head of every run is scored for each period (5 layers x 8 heads x 4 periods),
    // with contrasts in [-1, 1] and the residue below the period.
    assert_eq!(outcome.heads.len(), 4 * 5 * 8 * PERIODS.len());
    for h in &outcome.heads {
        assert!(h.residue < h.period && PERIODS.contains(&h.period), "{h:?}");
        for c in [h.contrast_train, h.contrast_test] {
            assert!((-1.0..=1.0).contains(&c), "{h:?}");
        }
        assert!((0.0..=1.0).contains(&h.bos_weight), "{h:?}");
    }
    let heads = std::fs::read_to_string(dir.path().join("heads.csv")).unwrap();
    assert_eq!(heads.lines().count(), 1 + outcome.heads.len());
    // The conventional-RoPE runs (base 1e4, two languages) get one offset row per scale, each
    // with its run's N*.
    assert_eq!(outcome.offsets.len(), 2 * OFFSET_SCALES.len());
    for o in &outcome.offsets {
        let run = rows
            .iter()
            .find(|r| r.language == o.language && r.base == Some(o.base))
            .unwrap();
        assert_eq!(o.n_star, run.n_star);
        assert_eq!(o.k, OFFSET_K);
    }
    assert!(dir.path().join("offset.csv").exists());

    // A rerun reads every run's lengths.csv (left untouched) and gives the same rows.
    let stamp = |p: &std::path::Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let files: Vec<_> = e
        .grid()
        .into_iter()
        .flat_map(|(l, pe, seed, lr)| {
            let run = ropelab_study::languages::run_dir(dir.path(), l, pe, seed, lr);
            [run.join("lengths.csv"), run.join("heads.csv")]
        })
        .collect();
    let before: Vec<_> = files.iter().map(|f| stamp(f)).collect();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = run(&e, dir.path(), None, &Quiet).unwrap();
    assert_eq!(again, outcome);
    let after: Vec<_> = files.iter().map(|f| stamp(f)).collect();
    assert_eq!(before, after);
}
